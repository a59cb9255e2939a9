"""Deterministic generators of the benchmark models.

The models are large and never committed: they are written to ``$GRAPHKIT_BENCH_DIR``
(default ``/tmp/graphkit-bench``), tiny variants (``--small``) to its ``small/`` subfolder.
A model that already exists is kept unless ``--force`` is given. Every generator is seeded,
so two runs write the same bytes.

Models (key, CLI alias, file):

- ``transformer`` (``a``), ``transformer.onnx``: a post-LayerNorm transformer encoder,
  8 layers, hidden 1024, 16 heads, FFN 4096, sequence 128, ~400 MB of inline float32 weights.
  Input ``x`` [1, 128, 1024], output ``y`` [1, 128, 1024]. Opset 17, so GELU is the exported
  Erf decomposition.
- ``many_nodes`` (``b``), ``many_nodes.onnx``: ~50k small nodes. 104 stages; each stage fans out
  into 4 branches of 40 Add-Mul-Relu blocks (each Add and Mul has its own [64] initializer) and
  merges them with Mean. Input ``x`` [1, 64], output ``y`` [1, 64].
- ``big_external`` (``c``), ``big_external/model.onnx`` + ``big_external/model.data``: ~2.7 GB of
  float32 weights in one ONNX external data file. A low-rank residual adapter
  (4096 -> 256 -> 4096, ~0.3 % of the weights) followed by 40 MatMul-Add-Relu layers with
  [4096, 4096] weights (~2.5 % each). Input ``x`` [1, 4096], output ``y`` [1, 4096].

Tensor naming. A node named ``N`` writes ``N/output``; a node that closes a module writes
``<module>/output`` instead, and the last node of the graph writes ``y``. Initializers are
``<module>/weight``, ``<module>/bias``, ``<module>/scale``; shared constants are ``/const/*``.
Names a slice can use (``i`` is a layer, stage, branch or block index):

- transformer: ``/layers.i/attn/{q,k,v}_proj/output``, ``/layers.i/attn/probs/output``
  (softmax), ``/layers.i/attn/context/output`` (heads merged), ``/layers.i/attn/out_proj/output``,
  ``/layers.i/attn/output`` (after residual + LayerNorm), ``/layers.i/ffn/fc1/output``,
  ``/layers.i/ffn/gelu/output``, ``/layers.i/ffn/fc2/output``, ``/layers.i/output`` (after
  residual + LayerNorm; the input of layer i+1). Layer 0 reads ``x``.
- many_nodes: ``/stage.s/branch.b/block.k/{add,mul,relu}/output``, ``/stage.s/output`` (the
  merge; the input of stage s+1). Stage 0 reads ``x``.
- big_external: ``/adapter/down/output``, ``/adapter/relu/output``, ``/adapter/up/output``,
  ``/adapter/output`` (after the residual; the input of layer 0), ``/layers.i/linear/output``,
  ``/layers.i/output``.

``slices_for(key, small=...)`` returns the benchmark slices of a model and ``SLICES`` those
of the full-size models; each `Slice` gives the share of the model's weight bytes it needs.

Run ``python bench/generate.py [--small] [--models a b c] [--force] [--verify]``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
MODEL_KEYS: tuple[str, ...] = ("transformer", "many_nodes", "big_external")
ALIASES: dict[str, str] = {"a": "transformer", "b": "many_nodes", "c": "big_external"}
DATA_FILE = "model.data"
_CHUNK_FLOATS = 4 * 1024 * 1024  # 16 MiB per write when streaming external weights
_ALIGN_THRESHOLD = 1024 * 1024  # like onnx: tensors of 1 MiB or more start on a 64 KiB boundary
_ALIGNMENT = 64 * 1024


@dataclass(frozen=True)
class Slice:
    """A named sub-model to extract: the tensors that become its inputs and outputs.

    Attributes:
        name: Short identifier used in benchmark tables.
        inputs: Tensor names that become the sub-model's graph inputs.
        outputs: Tensor names that become the sub-model's graph outputs.
        weight_share: Approximate fraction of the model's weight bytes the slice needs.
    """

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    weight_share: float | None = None


@dataclass(frozen=True)
class TransformerConfig:
    """Shape of the transformer encoder."""

    layers: int
    hidden: int
    heads: int
    ffn: int
    seq: int
    seed: int = 0


@dataclass(frozen=True)
class ManyNodesConfig:
    """Shape of the many-small-nodes model."""

    stages: int
    branches: int
    blocks: int
    width: int
    seed: int = 1


@dataclass(frozen=True)
class BigExternalConfig:
    """Shape of the external-data model; the adapter's rank is ``dim // 16`` (~0.3 % of weights)."""

    layers: int
    dim: int
    seed: int = 2

    @property
    def rank(self) -> int:
        """Inner width of the low-rank adapter."""
        return max(self.dim // 16, 1)


CONFIGS: dict[bool, dict[str, TransformerConfig | ManyNodesConfig | BigExternalConfig]] = {
    False: {
        "transformer": TransformerConfig(layers=8, hidden=1024, heads=16, ffn=4096, seq=128),
        "many_nodes": ManyNodesConfig(stages=104, branches=4, blocks=40, width=64),
        "big_external": BigExternalConfig(layers=40, dim=4096),
    },
    True: {
        "transformer": TransformerConfig(layers=8, hidden=32, heads=4, ffn=64, seq=8),
        "many_nodes": ManyNodesConfig(stages=8, branches=2, blocks=3, width=8),
        "big_external": BigExternalConfig(layers=40, dim=64),
    },
}


# ---------------------------------------------------------------------------------------------
# Paths


def default_root() -> Path:
    """The folder benchmark models live in: ``$GRAPHKIT_BENCH_DIR`` or ``/tmp/graphkit-bench``."""
    return Path(os.environ.get("GRAPHKIT_BENCH_DIR", "/tmp/graphkit-bench"))


def resolve_key(name: str) -> str:
    """Map a model key or its alias (``a``, ``b``, ``c``) to the model key.

    Raises:
        KeyError: If ``name`` is neither a key nor an alias.
    """
    key = ALIASES.get(name, name)
    if key not in MODEL_KEYS:
        raise KeyError(f"unknown model {name!r}; choose from {', '.join(MODEL_KEYS)} or a, b, c")
    return key


def model_path(key: str, root: Path | None = None, *, small: bool = False) -> Path:
    """Path of the ``.onnx`` file of model ``key`` under ``root``."""
    base = (root or default_root()) / ("small" if small else "")
    if key == "big_external":
        return base / "big_external" / "model.onnx"
    return base / f"{key}.onnx"


def model_files(key: str, root: Path | None = None, *, small: bool = False) -> list[Path]:
    """Every file of model ``key``: the ``.onnx`` file and, for external data, the data file."""
    path = model_path(key, root, small=small)
    return [path, path.parent / DATA_FILE] if key == "big_external" else [path]


def uses_external_data(key: str) -> bool:
    """Whether model ``key`` keeps its weights in an external data file."""
    return key == "big_external"


# ---------------------------------------------------------------------------------------------
# Slices


def _transformer_layer_params(cfg: TransformerConfig) -> tuple[int, int]:
    """Parameter counts of one layer's attention sub-block and FFN sub-block (incl. norms)."""
    h, f = cfg.hidden, cfg.ffn
    attn = 4 * (h * h + h) + 2 * h
    ffn = h * f + f + f * h + h + 2 * h
    return attn, ffn


def _transformer_slices(cfg: TransformerConfig) -> list[Slice]:
    attn, ffn = _transformer_layer_params(cfg)
    total = cfg.layers * (attn + ffn) + 2 * cfg.hidden
    h = cfg.hidden
    mid = cfg.layers // 2  # 4 for 8 layers
    return [
        Slice(
            "attn_block",
            (f"/layers.{mid - 2}/output",),
            (f"/layers.{mid - 1}/attn/out_proj/output",),
            (4 * (h * h + h)) / total,
        ),
        Slice(
            "one_layer", (f"/layers.{mid - 2}/output",), (f"/layers.{mid - 1}/output",), (attn + ffn) / total
        ),
        Slice(
            "multi_io",
            (*(f"/layers.{mid}/attn/{p}_proj/output" for p in ("q", "k", "v")), f"/layers.{mid - 1}/output"),
            (f"/layers.{mid}/attn/probs/output", f"/layers.{mid}/output"),
            (attn - 3 * (h * h + h) + ffn) / total,
        ),
        Slice("first_half", ("x",), (f"/layers.{mid - 1}/output",), mid * (attn + ffn) / total),
    ]


def _many_nodes_slices(cfg: ManyNodesConfig) -> list[Slice]:
    mid = cfg.stages // 2
    before = f"/stage.{mid - 1}/output"
    per_stage = 1 / cfg.stages
    return [
        Slice(
            "one_branch",
            (before,),
            (f"/stage.{mid}/branch.1/block.{cfg.blocks - 1}/relu/output",),
            per_stage / cfg.branches,
        ),
        Slice("one_stage", (before,), (f"/stage.{mid}/output",), per_stage),
        Slice("second_half", (before,), ("y",), (cfg.stages - mid) * per_stage),
    ]


def _big_external_slices(cfg: BigExternalConfig) -> list[Slice]:
    d, r = cfg.dim, cfg.rank
    adapter = 2 * d * r + r + d
    layer = d * d + d
    total = adapter + cfg.layers * layer
    tenth = max(round(0.1 * total / layer), 1)
    half = max(round(0.5 * total / layer), 1)
    start = cfg.layers // 4
    return [
        Slice("adapter", ("x",), ("/adapter/output",), adapter / total),
        Slice(
            "tenth",
            (f"/layers.{start - 1}/output",),
            (f"/layers.{start + tenth - 1}/output",),
            tenth * layer / total,
        ),
        Slice("half", (f"/layers.{cfg.layers - half - 1}/output",), ("y",), half * layer / total),
    ]


def slices_for(key: str, *, small: bool = False) -> list[Slice]:
    """The benchmark slices of model ``key`` (full-size or ``small`` variant)."""
    cfg = CONFIGS[small][resolve_key(key)]
    if isinstance(cfg, TransformerConfig):
        return _transformer_slices(cfg)
    if isinstance(cfg, ManyNodesConfig):
        return _many_nodes_slices(cfg)
    return _big_external_slices(cfg)


SLICES: dict[str, list[Slice]] = {key: slices_for(key) for key in MODEL_KEYS}


# ---------------------------------------------------------------------------------------------
# Graph building helpers


def _uniform(rng: np.random.Generator, shape: Sequence[int], bound: float) -> np.ndarray:
    """Float32 values uniform in [-bound, bound), computed in place."""
    values = rng.random(tuple(shape), dtype=np.float32)
    values -= 0.5
    values *= 2 * bound
    return values


class _Graph:
    """Collects nodes and initializers; ``add`` returns the name of the tensor it writes."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []

    def add(
        self, op: str, name: str, inputs: Iterable[str], *, output: str | None = None, **attrs: Any
    ) -> str:
        out = output or f"{name}/output"
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=name, **attrs))
        return out

    def const(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(array, name))
        return name


def _make_model(
    graph: _Graph,
    name: str,
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
) -> onnx.ModelProto:
    proto = helper.make_graph(graph.nodes, name, list(inputs), list(outputs), initializer=graph.initializers)
    model = helper.make_model(
        proto,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="graphkit-bench",
        ir_version=IR_VERSION,
    )
    return model


def _save_atomic(model: onnx.ModelProto, path: Path) -> None:
    """Serialize ``model`` next to ``path`` and rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(model.SerializeToString())
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# (a) transformer


def _linear(g: _Graph, rng: np.random.Generator, module: str, x: str, fan_in: int, fan_out: int) -> str:
    bound = 1 / math.sqrt(fan_in)
    weight = g.const(f"{module}/weight", _uniform(rng, (fan_in, fan_out), bound))
    bias = g.const(f"{module}/bias", _uniform(rng, (fan_out,), bound))
    product = g.add("MatMul", f"{module}/MatMul", [x, weight])
    return g.add("Add", f"{module}/Add", [product, bias], output=f"{module}/output")


def _layer_norm(g: _Graph, module: str, x: str, width: int, *, output: str) -> str:
    scale = g.const(f"{module}/scale", np.ones(width, dtype=np.float32))
    bias = g.const(f"{module}/bias", np.zeros(width, dtype=np.float32))
    return g.add("LayerNormalization", module, [x, scale, bias], output=output, axis=-1, epsilon=1e-5)


def _gelu(g: _Graph, module: str, x: str) -> str:
    """GELU as exported at opset 17: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    scaled = g.add("Div", f"{module}/Div", [x, "/const/sqrt2"])
    erf = g.add("Erf", f"{module}/Erf", [scaled])
    shifted = g.add("Add", f"{module}/Add", [erf, "/const/one"])
    product = g.add("Mul", f"{module}/Mul", [x, shifted])
    return g.add("Mul", f"{module}/Mul_1", [product, "/const/half"], output=f"{module}/output")


def _attention(g: _Graph, rng: np.random.Generator, cfg: TransformerConfig, module: str, x: str) -> str:
    heads: dict[str, str] = {}
    for part in ("q", "k", "v"):
        proj = _linear(g, rng, f"{module}/{part}_proj", x, cfg.hidden, cfg.hidden)
        split = g.add("Reshape", f"{module}/{part}_heads", [proj, "/const/heads_shape"])
        perm = [0, 2, 3, 1] if part == "k" else [0, 2, 1, 3]
        heads[part] = g.add("Transpose", f"{module}/{part}_t", [split], perm=perm)
    scores = g.add("MatMul", f"{module}/scores", [heads["q"], heads["k"]])
    scaled = g.add("Mul", f"{module}/scaled", [scores, "/const/attn_scale"])
    probs = g.add("Softmax", f"{module}/probs", [scaled], axis=-1)
    context = g.add("MatMul", f"{module}/context_heads", [probs, heads["v"]])
    context = g.add("Transpose", f"{module}/context_t", [context], perm=[0, 2, 1, 3])
    context = g.add("Reshape", f"{module}/context", [context, "/const/hidden_shape"])
    return _linear(g, rng, f"{module}/out_proj", context, cfg.hidden, cfg.hidden)


def _encoder_layer(g: _Graph, rng: np.random.Generator, cfg: TransformerConfig, index: int, x: str) -> str:
    layer = f"/layers.{index}"
    attended = _attention(g, rng, cfg, f"{layer}/attn", x)
    residual = g.add("Add", f"{layer}/attn/residual", [x, attended])
    normed = _layer_norm(g, f"{layer}/attn/norm", residual, cfg.hidden, output=f"{layer}/attn/output")
    hidden = _linear(g, rng, f"{layer}/ffn/fc1", normed, cfg.hidden, cfg.ffn)
    hidden = _gelu(g, f"{layer}/ffn/gelu", hidden)
    hidden = _linear(g, rng, f"{layer}/ffn/fc2", hidden, cfg.ffn, cfg.hidden)
    residual = g.add("Add", f"{layer}/ffn/residual", [normed, hidden])
    return _layer_norm(g, f"{layer}/norm", residual, cfg.hidden, output=f"{layer}/output")


def _transformer_constants(g: _Graph, cfg: TransformerConfig) -> None:
    head_dim = cfg.hidden // cfg.heads
    g.const("/const/heads_shape", np.array([0, 0, cfg.heads, head_dim], dtype=np.int64))
    g.const("/const/hidden_shape", np.array([0, 0, cfg.hidden], dtype=np.int64))
    g.const("/const/attn_scale", np.array(1 / math.sqrt(head_dim), dtype=np.float32))
    g.const("/const/sqrt2", np.array(math.sqrt(2), dtype=np.float32))
    g.const("/const/one", np.array(1, dtype=np.float32))
    g.const("/const/half", np.array(0.5, dtype=np.float32))


def build_transformer(cfg: TransformerConfig) -> onnx.ModelProto:
    """A post-LayerNorm transformer encoder with inline weights (see the module docstring)."""
    rng = np.random.default_rng(cfg.seed)
    g = _Graph()
    _transformer_constants(g, cfg)
    x = "x"
    for index in range(cfg.layers):
        x = _encoder_layer(g, rng, cfg, index, x)
    _layer_norm(g, "/final_norm", x, cfg.hidden, output="y")
    shape = [1, cfg.seq, cfg.hidden]
    return _make_model(
        g,
        "transformer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )


# ---------------------------------------------------------------------------------------------
# (b) many small nodes


def _branch(g: _Graph, params: np.ndarray, prefix: str, x: str) -> str:
    """A chain of Add-Mul-Relu blocks; ``params`` holds a (bias, scale) pair of rows per block."""
    for index in range(params.shape[0]):
        block = f"{prefix}/block.{index}"
        bias = g.const(f"{block}/add/bias", params[index, 0])
        scale = g.const(f"{block}/mul/scale", params[index, 1])
        x = g.add("Add", f"{block}/add", [x, bias])
        x = g.add("Mul", f"{block}/mul", [x, scale])
        x = g.add("Relu", f"{block}/relu", [x])
    return x


def _stage_params(rng: np.random.Generator, cfg: ManyNodesConfig) -> np.ndarray:
    """Biases in [-0.1, 0.1) and scales in [0.9, 1.1): values stay finite over thousands of blocks."""
    params = _uniform(rng, (cfg.branches, cfg.blocks, 2, cfg.width), 0.1)
    params[:, :, 1] += 1.0
    return params


def build_many_nodes(cfg: ManyNodesConfig) -> onnx.ModelProto:
    """Stages of parallel Add-Mul-Relu chains merged by Mean (see the module docstring)."""
    rng = np.random.default_rng(cfg.seed)
    g = _Graph()
    x = "x"
    for stage in range(cfg.stages):
        params = _stage_params(rng, cfg)
        ends = [_branch(g, params[b], f"/stage.{stage}/branch.{b}", x) for b in range(cfg.branches)]
        last = stage == cfg.stages - 1
        x = g.add("Mean", f"/stage.{stage}/mean", ends, output="y" if last else f"/stage.{stage}/output")
    shape = [1, cfg.width]
    return _make_model(
        g,
        "many_nodes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )


# ---------------------------------------------------------------------------------------------
# (c) big model with external data


class _DataWriter:
    """Streams float32 tensors into one external data file and returns their TensorProtos."""

    def __init__(self, file: object, location: str, rng: np.random.Generator) -> None:
        self._file = file
        self._location = location
        self._rng = rng
        self.offset = 0

    def _pad(self, nbytes: int) -> None:
        if nbytes < _ALIGN_THRESHOLD or self.offset % _ALIGNMENT == 0:
            return
        padding = _ALIGNMENT - self.offset % _ALIGNMENT
        self._file.write(b"\0" * padding)  # type: ignore[attr-defined]
        self.offset += padding

    def uniform(self, name: str, shape: Sequence[int], bound: float) -> TensorProto:
        """Write a uniform [-bound, bound) float32 tensor, chunk by chunk."""
        count = math.prod(shape)
        self._pad(4 * count)
        start = self.offset
        for begin in range(0, count, _CHUNK_FLOATS):
            chunk = _uniform(self._rng, (min(_CHUNK_FLOATS, count - begin),), bound)
            self._file.write(chunk.tobytes())  # type: ignore[attr-defined]
        self.offset += 4 * count
        return _external_tensor(name, shape, self._location, start, 4 * count)


def _external_tensor(name: str, shape: Sequence[int], location: str, offset: int, length: int) -> TensorProto:
    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(shape))
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def _external_linear(g: _Graph, data: _DataWriter, module: str, x: str, fan_in: int, fan_out: int) -> str:
    bound = math.sqrt(6 / fan_in)  # He-uniform: keeps activations O(1) through ReLU stacks
    g.initializers.append(data.uniform(f"{module}/weight", (fan_in, fan_out), bound))
    g.initializers.append(data.uniform(f"{module}/bias", (fan_out,), 0.01))
    product = g.add("MatMul", f"{module}/MatMul", [x, f"{module}/weight"])
    return g.add("Add", f"{module}/Add", [product, f"{module}/bias"], output=f"{module}/output")


def _adapter(g: _Graph, data: _DataWriter, cfg: BigExternalConfig, x: str) -> str:
    down = _external_linear(g, data, "/adapter/down", x, cfg.dim, cfg.rank)
    relu = g.add("Relu", "/adapter/relu", [down])
    up = _external_linear(g, data, "/adapter/up", relu, cfg.rank, cfg.dim)
    return g.add("Add", "/adapter/residual", [x, up], output="/adapter/output")


def build_big_external(
    cfg: BigExternalConfig, data_file: object, location: str = DATA_FILE
) -> onnx.ModelProto:
    """The adapter + MatMul stack; weights are streamed into ``data_file`` (an open binary file)."""
    data = _DataWriter(data_file, location, np.random.default_rng(cfg.seed))
    g = _Graph()
    x = _adapter(g, data, cfg, "x")
    for index in range(cfg.layers):
        layer = f"/layers.{index}"
        x = _external_linear(g, data, f"{layer}/linear", x, cfg.dim, cfg.dim)
        last = index == cfg.layers - 1
        x = g.add("Relu", f"{layer}/relu", [x], output="y" if last else f"{layer}/output")
    shape = [1, cfg.dim]
    return _make_model(
        g,
        "big_external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )


def _write_big_external(cfg: BigExternalConfig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data_path = path.parent / DATA_FILE
    tmp_data = data_path.with_name(DATA_FILE + ".tmp")
    with open(tmp_data, "wb", buffering=0) as handle:
        model = build_big_external(cfg, handle)
    os.replace(tmp_data, data_path)
    _save_atomic(model, path)  # written last: its presence means the model is complete


# ---------------------------------------------------------------------------------------------
# Entry points


_BUILDERS: dict[str, Callable[[object], onnx.ModelProto]] = {
    "transformer": build_transformer,  # type: ignore[dict-item]
    "many_nodes": build_many_nodes,  # type: ignore[dict-item]
}


def generate(key: str, root: Path | None = None, *, small: bool = False, force: bool = False) -> Path:
    """Write model ``key`` under ``root`` unless all its files exist; return its ``.onnx`` path."""
    key = resolve_key(key)
    path = model_path(key, root, small=small)
    if not force and all(f.exists() for f in model_files(key, root, small=small)):
        return path
    cfg = CONFIGS[small][key]
    if isinstance(cfg, BigExternalConfig):
        _write_big_external(cfg, path)
    else:
        _save_atomic(_BUILDERS[key](cfg), path)
    return path


def files_size(paths: Iterable[Path]) -> int:
    """Total size in bytes of the existing files among ``paths``."""
    return sum(p.stat().st_size for p in paths if p.exists())


def verify(path: Path, *, run: bool = True) -> str:
    """Check ``path`` with onnx.checker (by path) and, if ``run``, run it once in ONNX Runtime.

    Returns:
        A one-line summary (output shape and value range).

    Raises:
        onnx.checker.ValidationError: If the checker rejects the model.
        RuntimeError: If ONNX Runtime produces non-finite outputs.
    """
    onnx.checker.check_model(str(path))
    if not run:
        return "checker ok"
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {
        i.name: np.random.default_rng(0).standard_normal(i.shape).astype(np.float32)
        for i in session.get_inputs()
    }
    (out,) = session.run(None, feed)
    if not np.isfinite(out).all():
        raise RuntimeError(f"{path}: output has non-finite values")
    return f"checker ok, ort ok: y{list(out.shape)} in [{out.min():.3g}, {out.max():.3g}]"


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="output folder (default $GRAPHKIT_BENCH_DIR or /tmp/graphkit-bench)",
    )
    parser.add_argument(
        "--models", nargs="+", default=list(MODEL_KEYS), help="keys or aliases a b c (default: all)"
    )
    parser.add_argument("--small", action="store_true", help="write tiny variants under <dir>/small")
    parser.add_argument("--force", action="store_true", help="regenerate models that already exist")
    parser.add_argument(
        "--verify", action="store_true", help="run onnx.checker and ONNX Runtime on each model"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Generate the requested models and print their paths, sizes and timings."""
    args = _parse_args(argv)
    try:
        keys = [resolve_key(m) for m in args.models]
    except KeyError as err:
        print(f"generate: error: {err.args[0]}", file=sys.stderr)
        return 2
    for key in keys:
        start = time.perf_counter()
        existed = all(f.exists() for f in model_files(key, args.dir, small=args.small))
        path = generate(key, args.dir, small=args.small, force=args.force)
        elapsed = time.perf_counter() - start
        size = files_size(model_files(key, args.dir, small=args.small)) / 1e6
        state = "kept" if existed and not args.force else f"wrote in {elapsed:.1f} s"
        print(f"{key:13} {path}  {size:,.1f} MB  ({state})")
        if args.verify:
            start = time.perf_counter()
            print(f"{'':13} {verify(path)}  ({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
