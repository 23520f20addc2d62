"""The three inputs of netio-model: System, Model and Execution, read strictly.

Each is a frozen dataclass built from a JSON or TOML file (by extension) or a preset
name (a file in ``netio/model/presets/``: ``netio-model presets`` lists them). Every
key carries its unit in its name (``_bytes``, ``_s``, ``_bytes_per_s``,
``_bits_per_s``, ``_flops_per_s``). An unknown, missing or wrongly typed key, or a
value out of range, raises :class:`netio.errors.ModelInputError` naming the dotted key
and the file.

System
    ``name``; ``[accelerator]``: ``name``, ``memory_bytes``,
    ``memory_bandwidth_bytes_per_s``, ``[accelerator.peak_flops_per_s]`` one number per
    data type, ``matmul_efficiency_by_flops`` and ``memory_efficiency_by_bytes``: the
    achieved fraction of peak against the size of one operation, as ``[[size,
    fraction], ...]`` with size ascending (interpolated in log size, held at the ends),
    and ``fused_attention_efficiency``: the fraction of peak a fused (Flash) attention
    kernel achieves, forward and backward together. Optional, together:
    ``attention_score_efficiency_by_head_dim`` and
    ``attention_over_value_efficiency_by_head_dim``: the fraction of peak the unfused
    attention's batched products achieve against the head dimension, as ``[[head_dim,
    fraction], ...]`` (interpolated in log head_dim, held at the ends): ``Q K^T``, whose
    inner dimension is the head's, and ``P V``, whose output is one head wide. Without
    them each product runs at the matmul curve of the whole batch's FLOPs. Optional
    ``streaming_multiprocessors``: the accelerator's count of SMs (NVIDIA) or compute units
    (AMD); with it each GEMM is also charged its tile and wave quantization
    (:mod:`netio.model.gemm`), without it a GEMM runs at the curve of its FLOPs whatever
    its shape.
    ``[node]``: ``accelerators``, ``scaleup_bandwidth_bytes_per_s`` (per accelerator,
    per direction), ``scaleup_latency_s``, ``scaleup_efficiency_by_bytes``, ``nics``,
    ``nic_bandwidth_bits_per_s`` (per NIC), ``nic_latency_s``, ``nic_efficiency_by_bytes``.
    ``[fabric]``: ``topology`` (``single_switch``, ``leaf_spine``, ``rail_optimized``),
    ``nodes_per_leaf`` (nodes under one leaf; with ``rail_optimized``, under one rail
    switch, which each node reaches with one NIC per rail), ``oversubscription_ratio``
    (leaf down- to up-link bandwidth, 1 = non-blocking): groups spanning more nodes than
    one leaf holds cross the spine at ``1/oversubscription_ratio``. Optional
    ``[network]`` replaces the line rates by measured links:
    ``scale_up`` and ``scale_out`` tables of ``alpha_s`` and ``beta_s_per_byte`` (per
    accelerator and per NIC), or ``scale_out_profile``: the path (relative to the system
    file) of a netio fabric profile (:mod:`netio.fabric_profile`), whose fit and
    efficiency curve then describe each NIC. Optional ``[weight_streaming]`` describes a
    design whose weights live off the accelerator and stream over the network every step
    (wafer-scale): ``external_memory_bytes``, ``stream_bandwidth_bytes_per_s`` (into one
    accelerator), ``stream_latency_s``, ``reduction_tree_fanout`` and
    ``optimizer_on_memory_service``.

Model
    ``name``, ``layers``, ``hidden_size``, ``attention_heads``, ``kv_heads`` (GQA/MQA
    when fewer than the heads), ``ffn_hidden_size``, ``ffn_gated`` (SwiGLU-style: two
    input projections), ``vocab_size``, ``sequence_length``, ``dropout``,
    ``tied_embeddings``; optional ``[moe]``: ``experts``, ``top_k``, ``shared_experts``,
    ``capacity_factor``, ``expert_ffn_hidden_size``.

Execution
    ``tensor_parallel``, ``pipeline_parallel``, ``interleave`` (model chunks per pipeline
    rank; 1 is plain 1F1B), ``data_parallel``, ``expert_parallel`` (within the data
    parallel ranks), ``context_parallel``, ``sequence_parallel``, ``zero_stage`` (0..3;
    1 is Megatron's distributed optimizer), ``micro_batch_size``, ``global_batch_size``,
    ``recompute`` (``none``, ``selective``, ``full``), ``attention`` (``unfused``: the
    score matrix is materialised, as in Megatron before FlashAttention; ``flash``),
    ``compute_dtype``, ``grad_reduce_dtype``, ``overlap_grad_reduce`` (data-parallel
    reduction behind the last backward), ``overlap_tp_comm`` (with sequence parallelism,
    the tensor-parallel all-gathers and reduce-scatters pipelined with the GEMMs that
    consume and produce them, as Megatron's ``--tp-comm-overlap``). Two optional
    switches say what the software version did, both defaulting to what Megatron-LM has
    done since 2022: ``async_tp_grad_comm`` (the backward tensor-parallel collectives of
    the column-parallel GEMMs run on a second stream under their weight- or
    input-gradient GEMM; Megatron-LM since commit 3f65246911, 2021-09-02,
    ``--no-async-tensor-model-parallel-allreduce`` turns it off) and
    ``grad_accumulation_fusion`` (the weight-gradient GEMM adds into the main gradient
    in its epilogue instead of a separate accumulation pass; commit 83b1e42f30,
    2022-02-13, ``--no-gradient-accumulation-fusion``). The 2021 code of Narayanan et al.
    had neither.
"""

from __future__ import annotations

import itertools
import json
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from netio.errors import FabricProfileError, ModelInputError
from netio.fabric_profile import FabricProfile, load_fabric_profile

PRESET_DIR = Path(__file__).parent / "presets"
#: Bytes per element of each data type netio-model knows.
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}

FloatArray = npt.NDArray[np.float64]


class Topology(IntEnum):
    SINGLE_SWITCH = 0
    LEAF_SPINE = 1
    RAIL_OPTIMIZED = 2


class Recompute(IntEnum):
    NONE = 0
    SELECTIVE = 1
    FULL = 2


class Attention(IntEnum):
    UNFUSED = 0
    FLASH = 1


@dataclass(frozen=True, slots=True)
class Curve:
    """An achieved-efficiency curve: fraction of peak against the size of one operation
    (FLOPs or bytes), interpolated linearly in log10(size) and held flat at the ends."""

    sizes: tuple[float, ...]
    fractions: tuple[float, ...]

    def at(self, size: npt.ArrayLike) -> FloatArray:
        x = np.log10(np.maximum(np.asarray(size, dtype=np.float64), 1.0))
        return np.interp(x, np.log10(self.sizes), self.fractions)


FLAT = Curve((1.0,), (1.0,))


@dataclass(frozen=True, slots=True)
class Accelerator:
    name: str
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    peak_flops_per_s: Mapping[str, float]
    matmul_efficiency: Curve
    memory_efficiency: Curve
    fused_attention_efficiency: float
    # Unfused attention products by head dimension (see the module docstring); None: the
    # matmul curve at the batch's total FLOPs, as one GEMM of that size.
    attention_score_efficiency: Curve | None = None
    attention_over_value_efficiency: Curve | None = None
    # SMs (compute units) over which a GEMM's tiles run in waves; None: shape not modelled.
    streaming_multiprocessors: int | None = None

    def peak(self, dtype: str) -> float:
        if dtype not in self.peak_flops_per_s:
            raise ModelInputError("compute_dtype",
                                  f"{self.name} has no peak for {dtype} (it has "
                                  f"{', '.join(sorted(self.peak_flops_per_s))})")
        return self.peak_flops_per_s[dtype]


@dataclass(frozen=True, slots=True)
class Link:
    """One link class in the Hockney model: a message of ``n`` bytes takes
    ``alpha_s + beta_s_per_byte * n / efficiency(n)``."""

    alpha_s: float
    beta_s_per_byte: float
    efficiency: Curve = FLAT

    def with_beta(self, beta_s_per_byte: float) -> Link:
        return Link(self.alpha_s, beta_s_per_byte, self.efficiency)


@dataclass(frozen=True, slots=True)
class Node:
    accelerators: int
    nics: int
    scale_up: Link  # per accelerator, per direction
    scale_out: Link  # per NIC, per direction


@dataclass(frozen=True, slots=True)
class Fabric:
    topology: Topology
    nodes_per_leaf: int
    oversubscription_ratio: float


@dataclass(frozen=True, slots=True)
class WeightStreaming:
    external_memory_bytes: float
    stream_bandwidth_bytes_per_s: float
    stream_latency_s: float
    reduction_tree_fanout: int
    optimizer_on_memory_service: bool


@dataclass(frozen=True, slots=True)
class System:
    name: str
    accelerator: Accelerator
    node: Node
    fabric: Fabric
    weight_streaming: WeightStreaming | None = None
    scale_out_profile: FabricProfile | None = None
    #: Keys ("table.key") whose values no public source gives: results that depend on
    #: them say so (the preset's comments give what each is instead).
    unpublished: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Moe:
    experts: int
    top_k: int
    shared_experts: int
    capacity_factor: float
    expert_ffn_hidden_size: int


@dataclass(frozen=True, slots=True)
class Model:
    name: str
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    ffn_hidden_size: int
    ffn_gated: bool
    vocab_size: int
    sequence_length: int
    dropout: bool
    tied_embeddings: bool
    moe: Moe | None = None

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.attention_heads


@dataclass(frozen=True, slots=True)
class Execution:
    tensor_parallel: int
    pipeline_parallel: int
    interleave: int
    data_parallel: int
    expert_parallel: int
    context_parallel: int
    sequence_parallel: bool
    zero_stage: int
    micro_batch_size: int
    global_batch_size: int
    recompute: Recompute
    attention: Attention
    compute_dtype: str
    grad_reduce_dtype: str
    overlap_grad_reduce: bool
    overlap_tp_comm: bool
    async_tp_grad_comm: bool = True
    grad_accumulation_fusion: bool = True

    @property
    def accelerators(self) -> int:
        return (self.tensor_parallel * self.pipeline_parallel * self.data_parallel
                * self.context_parallel)


# --- strict reading ----------------------------------------------------------------------


class _Table:
    """One table of an input file; every error names the dotted key and the file."""

    def __init__(self, data: Mapping[str, Any], prefix: str, path: str) -> None:
        self.data, self.prefix, self.path = data, prefix, path
        self.seen: set[str] = set()

    def fail(self, name: str, reason: str) -> ModelInputError:
        return ModelInputError(f"{self.prefix}{name}", reason, path=self.path)

    def has(self, name: str) -> bool:
        return name in self.data

    def raw(self, name: str) -> Any:
        self.seen.add(name)
        if name not in self.data:
            raise self.fail(name, "missing")
        return self.data[name]

    def str_(self, name: str, choices: Sequence[str] = ()) -> str:
        v = self.raw(name)
        if not isinstance(v, str):
            raise self.fail(name, f"must be a string, not {type(v).__name__}")
        if choices and v not in choices:
            raise self.fail(name, f"must be one of {', '.join(choices)}, not {v!r}")
        return v

    def bool_(self, name: str) -> bool:
        v = self.raw(name)
        if not isinstance(v, bool):
            raise self.fail(name, f"must be true or false, not {type(v).__name__}")
        return v

    def int_(self, name: str, minimum: int = 1) -> int:
        v = self.raw(name)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(name, f"must be an integer, not {type(v).__name__}")
        if v < minimum:
            raise self.fail(name, f"must be >= {minimum}, not {v}")
        return v

    def _number(self, name: str, v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise self.fail(name, f"must be a finite number, not {v!r}")
        return float(v)

    def float_(self, name: str, low: float = 0.0, *, positive: bool = True,
               high: float = math.inf) -> float:
        v = self._number(name, self.raw(name))
        if v < low or (positive and v == 0.0) or v > high:
            raise self.fail(name, f"must be {'>' if positive else '>='} {low}"
                            f"{f' and <= {high}' if high < math.inf else ''}, not {v}")
        return v

    def curve(self, name: str) -> Curve:
        v = self.raw(name)
        if (not isinstance(v, list) or not v
                or not all(isinstance(p, list) and len(p) == 2 for p in v)):
            raise self.fail(name, "must be a non-empty list of [size, fraction] pairs")
        sizes = [self._number(name, p[0]) for p in v]
        fractions = [self._number(name, p[1]) for p in v]
        if any(s <= 0 for s in sizes) or any(b <= a for a, b in itertools.pairwise(sizes)):
            raise self.fail(name, "sizes must be positive and strictly ascending")
        if any(not 0.0 < f <= 1.0 for f in fractions):
            raise self.fail(name, "fractions must be in (0, 1]")
        return Curve(tuple(sizes), tuple(fractions))

    def table(self, name: str) -> _Table:
        v = self.raw(name)
        if not isinstance(v, dict):
            raise self.fail(name, f"must be a table, not {type(v).__name__}")
        return _Table(v, f"{self.prefix}{name}.", self.path)

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            raise self.fail(unknown[0], "unknown key")


def _read(source: str | Path, kind: str) -> tuple[dict[str, Any], str, Path | None]:
    """The parsed document, its name for messages and its path (None for presets)."""
    path = Path(source)
    if not path.exists():
        for ext in (".toml", ".json"):
            preset = PRESET_DIR / kind / f"{source}{ext}"
            if preset.is_file():
                path = preset
                break
        else:
            names = ", ".join(preset_names(kind))
            raise ModelInputError("", f"no such file, and not a {kind} preset ({names})",
                                  path=str(source))
    name = str(source)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ModelInputError("", f"cannot read: {exc.strerror or exc}", path=name) from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelInputError("", f"not JSON: {exc.msg} at line {exc.lineno}",
                              path=name) from None
    except tomllib.TOMLDecodeError as exc:
        raise ModelInputError("", f"not TOML: {exc}", path=name) from None
    if not isinstance(data, dict):
        raise ModelInputError("", "must be a table of keys", path=name)
    return data, name, path


def preset_names(kind: str) -> list[str]:
    """The presets of one kind (``system``, ``model``, ``execution``)."""
    return sorted(p.stem for p in (PRESET_DIR / kind).glob("*.*") if p.suffix in
                  (".toml", ".json"))


def _link(t: _Table, bw_key: str, bw_scale: float, lat_key: str, eff_key: str) -> Link:
    bw = t.float_(bw_key) * bw_scale
    return Link(t.float_(lat_key, positive=False), 1.0 / bw, t.curve(eff_key))


def _alpha_beta(t: _Table, name: str, base: Link) -> Link:
    s = t.table(name)
    link = Link(s.float_("alpha_s", positive=False), s.float_("beta_s_per_byte"),
                base.efficiency)
    s.done()
    return link


def system_from_dict(data: Mapping[str, Any], path: str = "<system>",
                     base_dir: Path | None = None) -> System:
    r = _Table(data, "", path)
    name = r.str_("name")
    a = r.table("accelerator")
    peaks_t = a.table("peak_flops_per_s")
    peaks = {}
    for dtype in sorted(peaks_t.data):
        if dtype not in DTYPE_BYTES:
            raise peaks_t.fail(dtype, f"unknown data type (known: {', '.join(DTYPE_BYTES)})")
        peaks[dtype] = peaks_t.float_(dtype)
    peaks_t.done()
    score_key, value_key = ("attention_score_efficiency_by_head_dim",
                            "attention_over_value_efficiency_by_head_dim")
    if a.has(score_key) != a.has(value_key):
        given, missing = (score_key, value_key) if a.has(score_key) else (value_key, score_key)
        raise a.fail(missing, f"missing (it goes with {given})")
    acc = Accelerator(a.str_("name"), a.float_("memory_bytes"),
                      a.float_("memory_bandwidth_bytes_per_s"), peaks,
                      a.curve("matmul_efficiency_by_flops"), a.curve("memory_efficiency_by_bytes"),
                      a.float_("fused_attention_efficiency", high=1.0),
                      a.curve(score_key) if a.has(score_key) else None,
                      a.curve(value_key) if a.has(value_key) else None,
                      a.int_("streaming_multiprocessors")
                      if a.has("streaming_multiprocessors") else None)
    a.done()
    n = r.table("node")
    accelerators, nics = n.int_("accelerators"), n.int_("nics")
    scale_up = _link(n, "scaleup_bandwidth_bytes_per_s", 1.0, "scaleup_latency_s",
                     "scaleup_efficiency_by_bytes")
    scale_out = _link(n, "nic_bandwidth_bits_per_s", 1 / 8, "nic_latency_s",
                      "nic_efficiency_by_bytes")
    n.done()
    f = r.table("fabric")
    topo = f.str_("topology", [t.name.lower() for t in Topology])
    fabric = Fabric(Topology[topo.upper()], f.int_("nodes_per_leaf"),
                    f.float_("oversubscription_ratio", 1.0, positive=False))
    f.done()
    profile = None
    if r.has("network"):
        net = r.table("network")
        if net.has("scale_up"):
            scale_up = _alpha_beta(net, "scale_up", scale_up)
        if net.has("scale_out") and net.has("scale_out_profile"):
            raise net.fail("scale_out_profile", "give scale_out or scale_out_profile, not both")
        if net.has("scale_out"):
            scale_out = _alpha_beta(net, "scale_out", scale_out)
        elif net.has("scale_out_profile"):
            rel = Path(net.str_("scale_out_profile"))
            ppath = rel if rel.is_absolute() or base_dir is None else base_dir / rel
            try:
                profile = load_fabric_profile(ppath)
            except FabricProfileError as exc:
                raise ModelInputError(f"network.scale_out_profile ({exc.key})", exc.reason,
                                      path=f"{path} -> {ppath}") from None
            eff = Curve(tuple(float(e.message_bytes) for e in profile.efficiency),
                        tuple(e.efficiency for e in profile.efficiency))
            scale_out = Link(profile.fit.alpha_s, profile.fit.beta_s_per_byte, eff)
        net.done()
    ws = None
    if r.has("weight_streaming"):
        w = r.table("weight_streaming")
        ws = WeightStreaming(w.float_("external_memory_bytes"),
                             w.float_("stream_bandwidth_bytes_per_s"),
                             w.float_("stream_latency_s", positive=False),
                             w.int_("reduction_tree_fanout", 2),
                             w.bool_("optimizer_on_memory_service"))
        w.done()
    unpublished: tuple[str, ...] = ()
    if r.has("unpublished"):
        v = r.raw("unpublished")
        if not isinstance(v, list) or not all(isinstance(k, str) for k in v):
            raise r.fail("unpublished", "must be a list of \"table.key\" strings")
        for k in v:
            table, _, key = k.partition(".")
            sub = data.get(table)
            if not isinstance(sub, Mapping) or key not in sub:
                raise r.fail("unpublished", f"{k!r} names no key of this system")
        unpublished = tuple(v)
    r.done()
    return System(name, acc, Node(accelerators, nics, scale_up, scale_out), fabric, ws, profile,
                  unpublished)


def model_from_dict(data: Mapping[str, Any], path: str = "<model>") -> Model:
    r = _Table(data, "", path)
    moe = None
    if r.has("moe"):
        m = r.table("moe")
        moe = Moe(m.int_("experts"), m.int_("top_k"), m.int_("shared_experts", 0),
                  m.float_("capacity_factor"), m.int_("expert_ffn_hidden_size"))
        m.done()
        if moe.top_k > moe.experts:
            raise m.fail("top_k", f"must be <= experts ({moe.experts}), not {moe.top_k}")
    model = Model(r.str_("name"), r.int_("layers"), r.int_("hidden_size"),
                  r.int_("attention_heads"), r.int_("kv_heads"), r.int_("ffn_hidden_size"),
                  r.bool_("ffn_gated"), r.int_("vocab_size"), r.int_("sequence_length"),
                  r.bool_("dropout"), r.bool_("tied_embeddings"), moe)
    r.done()
    if model.hidden_size % model.attention_heads:
        raise r.fail("attention_heads", f"must divide hidden_size ({model.hidden_size})")
    if model.attention_heads % model.kv_heads:
        raise r.fail("kv_heads", f"must divide attention_heads ({model.attention_heads})")
    return model


def execution_from_dict(data: Mapping[str, Any], path: str = "<execution>") -> Execution:
    r = _Table(data, "", path)
    ex = Execution(
        r.int_("tensor_parallel"), r.int_("pipeline_parallel"), r.int_("interleave"),
        r.int_("data_parallel"), r.int_("expert_parallel"), r.int_("context_parallel"),
        r.bool_("sequence_parallel"), r.int_("zero_stage", 0), r.int_("micro_batch_size"),
        r.int_("global_batch_size"),
        Recompute[r.str_("recompute", [x.name.lower() for x in Recompute]).upper()],
        Attention[r.str_("attention", [x.name.lower() for x in Attention]).upper()],
        r.str_("compute_dtype", list(DTYPE_BYTES)), r.str_("grad_reduce_dtype", list(DTYPE_BYTES)),
        r.bool_("overlap_grad_reduce"), r.bool_("overlap_tp_comm"),
        # optional: what Megatron-LM has done by default since 2022 (see the docstring)
        r.bool_("async_tp_grad_comm") if r.has("async_tp_grad_comm") else True,
        r.bool_("grad_accumulation_fusion") if r.has("grad_accumulation_fusion") else True)
    r.done()
    if ex.zero_stage > 3:
        raise r.fail("zero_stage", f"must be 0, 1, 2 or 3, not {ex.zero_stage}")
    if ex.interleave > 1 and ex.pipeline_parallel == 1:
        raise r.fail("interleave", "needs pipeline_parallel > 1")
    return ex


def load_system(source: str | Path) -> System:
    """A System from a JSON/TOML file or a preset name."""
    data, name, path = _read(source, "system")
    return system_from_dict(data, name, path.parent if path else None)


def load_model(source: str | Path) -> Model:
    """A Model from a JSON/TOML file or a preset name."""
    data, name, _ = _read(source, "model")
    return model_from_dict(data, name)


def load_execution(source: str | Path) -> Execution:
    """An Execution from a JSON/TOML file or a preset name."""
    data, name, _ = _read(source, "execution")
    return execution_from_dict(data, name)
