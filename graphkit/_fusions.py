"""Fusions into ONNX Runtime's contrib operators (domain ``com.microsoft``), for simplify's target
``onnxruntime``: the result runs in ONNX Runtime only, which is why simplify never makes them unless
asked (standard ONNX runs wherever the original did).

Each fusion works on one graph in place, matches its pattern through the graph index, and returns
how many nodes went; ``graphkit._simplify`` runs them on the main graph as its ``attention``, ``gelu``
and ``skip_layernorm`` passes. A pattern is fused only where the contrib operator computes the same
function (up to float rounding: the kernels sum in another order), else it is left as it is:

- ``attention``: multi-head self-attention as exporters write it, ``Softmax(scale · Q Kᵀ) V`` with
  Q, K and V each ``MatMul(x, W) (+ b)`` of one input ``x`` proven ``[batch, seq, hidden]``, split
  into heads by a Reshape whose constant target gives the head count (``[0, 0, heads, size]``, a
  ``-1``, or the static dims themselves) and a Transpose (``[0, 2, 1, 3]``; ``[0, 2, 3, 1]`` for K,
  or K's ``[0, 2, 1, 3]`` then ``[0, 1, 3, 2]``), merged back by ``Transpose [0, 2, 1, 3]`` and a
  Reshape to ``[batch, seq, hidden]``, scaled by scalar constants (Mul or Div) on the scores or on Q
  or K, becomes one ``Attention`` (``num_heads`` from the Reshape, ``scale`` the product of the scale
  constants, Q/K/V weights and biases packed into one weight and one bias). Q, K and V may also come
  from one projection already packed that way (a vision transformer's ``qkv``: reshaped to ``[batch,
  seq, 3, heads, size]``, transposed by ``[2, 0, 3, 1, 4]`` and taken apart by Gathers or a Split), whose
  weight Attention then reads as it is, where it lies. A mask added to the
  scaled scores (``Softmax(scale · Q Kᵀ + m)``) becomes its ``attention_bias``, which ONNX Runtime
  adds after the scale as the graph did: as it is where m is proven ``[batch or 1, heads or 1, seq,
  seq]`` (a causal mask), and a padding mask ``[batch or 1, 1, 1, seq]`` broadcast along the queries
  (a constant's broadcast value; an Expand to the static shape; with dynamic dims an Expand to
  ``[1, 1, seq, 1]``, seq read from x's shape, one per mask for every layer).
  A mask added before the scale (it would be scaled too), anything else between the scores and the
  Softmax, unequal head counts, a Reshape target that does not prove the head split, float16 (ONNX
  Runtime's CPU kernel is float only) and intermediate tensors read elsewhere leave the block alone.
- ``gelu``: ``x · 0.5 · (1 + erf(x / √2))`` (Div by √2 or Mul by 1/√2, the two Muls in any order or
  association, operands either way round; the constants exactly float32's 0.5, 1, √2 or 1/√2)
  becomes ``Gelu(x)``, or ``BiasGelu(a, b)`` when x is ``Add(a, b)`` of a 1-D constant bias whose
  length is a's last dim (proven by a MatMul's constant weight or by inference). The tanh
  approximation ``x · 0.5 · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`` (GPT-2's ``gelu_new``, torch's
  ``approximate="tanh"``; the cube a Pow by 3 or two Muls, the constants exactly float32's) becomes
  ``FastGelu``, the bias its second input.
- ``skip_layernorm``: a layer normalization over the last axis of ``Add(a, b)`` (a
  LayerNormalization, or the decomposition exporters write below opset 17: ``(x - mean) / sqrt(var
  + eps) * scale + bias`` of ReduceMeans over the last axis, the square a Pow by 2 or a Mul), with a
  and b proven of the same shape of rank 3 and 1-D constant scale and bias of the hidden size,
  becomes ``SkipLayerNormalization(a, b, scale, bias)``; a 1-D constant bias added to a or b just before
  (a projection's bias) becomes its ``bias`` input, and where the sum is read elsewhere too (a
  pre-norm residual stream) its fourth output writes it.

Float32 only: the CPU kernels of these operators are float32 (and where a verification runs, it
runs on CPU). Weights are read only where they are packed (the attention's Q, K and V) and only the
few scalar constants the patterns test are read otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from graphkit._edit.cleaning import _prune
from graphkit._graph import GraphIndex, fresh_name
from graphkit._typing import tensor_dims

__all__ = ["DOMAIN", "fuse_attention", "fuse_gelu", "fuse_skip_layernorm", "type_candidates"]

#: The contrib operators' domain, imported at version 1.
DOMAIN = "com.microsoft"
_STANDARD = ("", "ai.onnx")
_FLOAT = onnx.TensorProto.FLOAT
#: Scalars are read only up to this many bytes (a constant of one element).
_SCALAR_BYTES = 64
#: The Gelu constants, as float32 holds them.
_SQRT2 = float(np.float32(math.sqrt(2.0)))
_RSQRT2 = float(np.float32(1.0 / math.sqrt(2.0)))
#: The tanh approximation's constants, as float32 holds them.
_SQRT_2_PI = float(np.float32(math.sqrt(2.0 / math.pi)))
_KAPPA = float(np.float32(0.044715))

Read = Callable[[onnx.TensorProto], np.ndarray]
Types = Mapping[str, onnx.TypeProto]


# ------------------------------------------------------------------------------------ helpers


def _attr(node: onnx.NodeProto, name: str, default: object) -> object:
    for attr in node.attribute:
        if attr.name == name:
            return helper.get_attribute_value(attr)
    return default


def _producer(index: GraphIndex, name: str, op: str | tuple[str, ...]) -> int | None:
    """The position of the standard ``op`` node writing ``name`` (its first output), or None."""
    at = index.producer.get(name)
    if at is None:
        return None
    node = index.nodes[at]
    ops = (op,) if isinstance(op, str) else op
    return at if node.op_type in ops and node.domain in _STANDARD and node.output[0] == name else None


def _only_for(index: GraphIndex, name: str, reader: int) -> bool:
    """Whether ``name`` is read by the node at ``reader`` alone (and is no graph output)."""
    return index.sole_reader(name) == reader


def _elem(tp: onnx.TypeProto | None) -> int:
    return tp.tensor_type.elem_type if tp is not None and tp.WhichOneof("value") == "tensor_type" else 0


def _same_dim(a: int | str, b: int | str) -> bool:
    """Two dims proven equal: the same size, or the same name (not a placeholder for an unknown)."""
    if isinstance(a, int) or isinstance(b, int):
        return a == b and isinstance(a, int) and a > 0
    return a == b and a != "?" and not a.startswith("unk")


def _scalar(consts: Mapping[str, onnx.TensorProto], read: Read, name: str) -> float | None:
    """The value of a float32 constant of one element and rank 0 or 1, or None."""
    tensor = consts.get(name)
    if tensor is None or tensor.data_type != _FLOAT or len(tensor.dims) > 1 or math.prod(tensor.dims) != 1:
        return None
    value = float(read(tensor).reshape(-1)[0])
    return value if math.isfinite(value) else None


def _ints(consts: Mapping[str, onnx.TensorProto], read: Read, name: str) -> list[int] | None:
    tensor = consts.get(name)
    if tensor is None or tensor.data_type != onnx.TensorProto.INT64 or len(tensor.dims) != 1 or tensor.dims[0] > 8:
        return None
    return [int(v) for v in read(tensor)]


def _vector(consts: Mapping[str, onnx.TensorProto], name: str, length: int) -> bool:
    """Whether ``name`` is a float32 constant of shape ``[length]``."""
    tensor = consts.get(name)
    return tensor is not None and tensor.data_type == _FLOAT and list(tensor.dims) == [length]


def _matrix(consts: Mapping[str, onnx.TensorProto], name: str) -> tuple[int, int] | None:
    tensor = consts.get(name)
    if tensor is None or tensor.data_type != _FLOAT or len(tensor.dims) != 2:
        return None
    return int(tensor.dims[0]), int(tensor.dims[1])


def _other(node: onnx.NodeProto, name: str) -> str:
    """The other input of a two-input node that reads ``name``."""
    return node.input[1] if node.input[0] == name else node.input[0]


def _scale_of(index: GraphIndex, at: int, consts: Mapping[str, onnx.TensorProto], read: Read) -> tuple[str, float] | None:
    """(data input, factor) when the node at ``at`` multiplies by a scalar constant (Mul by c: c, Div by
    c: 1/c), else None."""
    node = index.nodes[at]
    if node.domain not in _STANDARD or len(node.input) != 2:
        return None
    if node.op_type == "Mul":
        for data, const in ((node.input[0], node.input[1]), (node.input[1], node.input[0])):
            value = _scalar(consts, read, const)
            if value is not None and data not in consts:
                return data, value
    elif node.op_type == "Div":
        value = _scalar(consts, read, node.input[1])
        if value and node.input[0] not in consts:
            return node.input[0], 1.0 / value
    return None


def _replace(graph: onnx.GraphProto, index: GraphIndex, replaced: Mapping[int, onnx.NodeProto],
             removed: Sequence[int]) -> int:
    """Put each new node at its position, remove the others and what only they read; nodes removed."""
    for at, node in replaced.items():
        graph.node[at].CopyFrom(node)
    before = len(graph.node)
    _prune(graph, sorted(set(removed)))
    dropped = {o for i in removed for o in index.nodes[i].output}
    kept = [v for v in graph.value_info if v.name not in dropped]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    return before - len(graph.node)


# ------------------------------------------------------------------------- what needs a type


def type_candidates(graph: onnx.GraphProto) -> list[str]:
    """The tensors whose inferred types the fusions need (on the graph before any of them ran):
    every MatMul's data input (an attention's x), every Reshape's (the x of a Gemm's 2-D input) and
    every Add's inputs (a residual or a bias)."""
    names: list[str] = []
    for node in graph.node:
        if node.domain not in _STANDARD:
            continue
        if node.op_type in ("MatMul", "Reshape") and node.input:
            names.append(node.input[0])
        elif node.op_type == "Add" and len(node.input) == 2:
            names.extend(node.input)
    return list(dict.fromkeys(names))


# ------------------------------------------------------------------------------------- attention


@dataclass
class _Head:
    """One of Q, K, V: its projection and the nodes from the projection to the scores."""

    x: str
    weight: str
    bias: str | None
    width: int
    heads: int
    size: int
    nodes: list[int]
    factor: float
    #: The weight is stored ``[width, hidden in]`` (a Gemm's transB).
    transposed: bool = False
    #: Q, K and V come from one projection already packed as Attention packs them (weight and bias
    #: are that projection's, for all three).
    packed: bool = False


@dataclass
class _Block:
    """A matched attention block."""

    heads: tuple[_Head, _Head, _Head]
    nodes: list[int]
    scale: float
    #: The position of the Reshape that writes the block's output.
    out_at: int
    #: The additive bias of the scores (a mask), "" for none, and how it reaches Attention's
    #: ``attention_bias``: as it is (None), or broadcast along its dim 2 of 1 to the sequence: to a
    #: static shape (a list), or (a str: the input x) to x's sequence length read at run time.
    bias: str = ""
    expand: list[int] | str | None = None


def fuse_attention(graph: onnx.GraphProto, consts: Mapping[str, onnx.TensorProto], types: Types, read: Read,
                   taken: set[str], opset: int) -> int:
    """Replace each multi-head attention block by ``com.microsoft::Attention`` (module docstring).

    Args:
        graph: The main graph, changed in place.
        consts: Its constants (name → initializer).
        types: Inferred types of ``type_candidates``' tensors.
        read: Reads a constant's value.
        taken: Every name of the model (new names are added).
        opset: The model's default-domain opset.

    Returns:
        How many nodes went.
    """
    index = GraphIndex(graph)
    replaced: dict[int, onnx.NodeProto] = {}
    removed: list[int] = []
    claimed: set[int] = set()
    expanded: dict[str, str] = {}
    broadcast: dict[str, str] = {}
    for i, node in enumerate(index.nodes):
        if node.op_type != "Softmax" or node.domain not in _STANDARD:
            continue
        block = _attention_at(index, i, consts, types, read, opset)
        if block is None or claimed & set(block.nodes):
            continue
        claimed.update(block.nodes)
        q, k, v = block.heads
        out = index.nodes[block.out_at]
        stem = out.name or node.name or out.output[0]
        if q.packed:  # (the model's own packed weight, read where it lies)
            w_name, b_name = q.weight, q.bias or fresh_name(f"{stem}/qkv_bias", taken)
            if not q.bias:
                graph.initializer.append(numpy_helper.from_array(np.zeros(3 * q.width, np.float32), b_name))
        else:
            weights = np.concatenate([read(consts[h.weight]).T if h.transposed else read(consts[h.weight])
                                      for h in block.heads], axis=1)
            biases = np.concatenate([read(consts[h.bias]) if h.bias else np.zeros(h.width, np.float32)
                                     for h in block.heads])
            w_name, b_name = fresh_name(f"{stem}/qkv_weight", taken), fresh_name(f"{stem}/qkv_bias", taken)
            graph.initializer.extend([numpy_helper.from_array(weights.astype(np.float32), w_name),
                                      numpy_helper.from_array(biases.astype(np.float32), b_name)])
        attrs: dict[str, Any] = {"num_heads": q.heads, "scale": block.scale}
        if v.width != q.width:
            attrs["qkv_hidden_sizes"] = [q.width, k.width, v.width]
        inputs = [q.x, w_name, b_name]
        if block.bias:
            inputs += ["", "", _attention_bias(graph, block, expanded, broadcast, consts, read, taken, opset)]
        replaced[block.out_at] = helper.make_node("Attention", inputs, [out.output[0]],
                                                  name=fresh_name(f"{stem}/Attention", taken), domain=DOMAIN, **attrs)
        removed.extend(n for n in block.nodes if n != block.out_at)
    if not replaced:
        return 0
    count = _replace(graph, index, replaced, removed)
    if expanded:  # (each Expand goes right after the producer of the mask it reads)
        order = GraphIndex(graph).topological_order()
        nodes = [graph.node[j] for j in order]
        del graph.node[:]
        graph.node.extend(nodes)
    return count - len(expanded)


def _attention_bias(graph: onnx.GraphProto, block: _Block, expanded: dict[str, str], broadcast: dict[str, str],
                    consts: Mapping[str, onnx.TensorProto], read: Read, taken: set[str], opset: int) -> str:
    """The tensor for Attention's ``attention_bias``: the scores' additive bias itself, or it broadcast to
    ``[batch or 1, heads or 1, seq, seq]`` (a constant's broadcast value; else one Expand shared by the
    blocks that add the same mask)."""
    if block.expand is None:
        return block.bias
    if isinstance(block.expand, str):
        return _dynamic_expand(graph, block.bias, block.expand, expanded, taken, opset)
    if block.bias in consts:
        if block.bias not in broadcast:
            name = fresh_name(f"{block.bias}/attention_bias", taken)
            value = np.broadcast_to(read(consts[block.bias]), block.expand)
            graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
            broadcast[block.bias] = name
        return broadcast[block.bias]
    if block.bias not in expanded:
        shape = fresh_name(f"{block.bias}/attention_bias_shape", taken)
        graph.initializer.append(helper.make_tensor(shape, onnx.TensorProto.INT64, [4], block.expand))
        out = fresh_name(f"{block.bias}/attention_bias", taken)
        graph.node.append(helper.make_node("Expand", [block.bias, shape], [out], name=out))
        expanded[block.bias] = out
    return expanded[block.bias]


def _dynamic_expand(graph: onnx.GraphProto, bias: str, x: str, expanded: dict[str, str], taken: set[str],
                    opset: int) -> str:
    """``Expand(bias, [1, 1, seq, 1])`` with seq read from x's shape at run time (``Shape(x, start=1, end=2)``;
    before opset 15 ``Gather(Shape(x), [1])``): Expand broadcasts both ways, so ``[batch, 1, 1, seq]``
    becomes ``[batch, 1, seq, seq]`` (three or four nodes, shared by every block that adds the same mask)."""
    if bias not in expanded:
        seq, ones, one = (fresh_name(f"{bias}/{stem}", taken) for stem in ("seq", "ones", "one"))
        shape, out = fresh_name(f"{bias}/attention_bias_shape", taken), fresh_name(f"{bias}/attention_bias", taken)
        graph.initializer.extend([helper.make_tensor(ones, onnx.TensorProto.INT64, [2], [1, 1]),
                                  helper.make_tensor(one, onnx.TensorProto.INT64, [1], [1])])
        if opset >= 15:
            graph.node.append(helper.make_node("Shape", [x], [seq], name=seq, start=1, end=2))
        else:
            dims = fresh_name(f"{bias}/input_shape", taken)
            graph.node.extend([helper.make_node("Shape", [x], [dims], name=dims),
                               helper.make_node("Gather", [dims, one], [seq], name=seq, axis=0)])
        graph.node.extend([helper.make_node("Concat", [ones, seq, one], [shape], name=shape, axis=0),
                           helper.make_node("Expand", [bias, shape], [out], name=out)])
        expanded[bias] = out
    return expanded[bias]


def _attention_at(index: GraphIndex, i: int, consts: Mapping[str, onnx.TensorProto], types: Types, read: Read,
                  opset: int) -> _Block | None:
    """The block around the Softmax at ``i``, or None where it is not exactly an Attention."""
    softmax = index.nodes[i]
    if _attr(softmax, "axis", -1 if opset >= 13 else 1) not in (-1, 3) or len(softmax.output) != 1:
        return None
    nodes = [i]
    context_at = index.sole_reader(softmax.output[0])
    if context_at is None:
        return None
    context = index.nodes[context_at]
    if context.op_type != "MatMul" or context.domain not in _STANDARD or context.input[0] != softmax.output[0]:
        return None
    nodes.append(context_at)
    bias = ""
    chain = _scores(index, softmax.input[0], i, consts, read)
    if chain is None:  # (an additive bias, a mask, added to the scaled scores)
        add_at = _producer(index, softmax.input[0], "Add")
        if add_at is None or not _only_for(index, softmax.input[0], i):
            return None
        add = index.nodes[add_at]
        found = [(_scores(index, data, add_at, consts, read), _other(add, data)) for data in add.input]
        found = [(c, other) for c, other in found if c is not None]
        if len(found) != 1 or add.input[0] == add.input[1]:
            return None
        chain, bias = found[0]
        nodes.append(add_at)
    assert chain is not None
    scores_at, factor, scaling = chain
    nodes += [scores_at, *scaling]
    scores = index.nodes[scores_at]
    q = _head(index, scores.input[0], scores_at, [0, 2, 1, 3], consts, types, read)
    k = _head(index, scores.input[1], scores_at, [0, 2, 3, 1], consts, types, read)
    v = _head(index, context.input[1], context_at, [0, 2, 1, 3], consts, types, read)
    if q is None and k is None and v is None:
        q, k, v = _packed_heads(index, scores_at, context_at, consts, types, read) or (None, None, None)
    if q is None or k is None or v is None or v.factor != 1.0 or not (q.x == k.x == v.x) \
            or q.width != k.width or not (q.heads == k.heads == v.heads):
        return None
    merged = _merge(index, context_at, v, consts, types, read)
    if merged is None:
        return None
    nodes.extend(merged)
    nodes.extend(n for h in (q, k, v) for n in h.nodes)
    if len(set(nodes)) != len(nodes):
        return None
    block = _Block((q, k, v), nodes, float(np.float32(factor * q.factor * k.factor)), merged[-1])
    if not block.scale or not math.isfinite(block.scale):  # (Attention reads scale 0 as 1/√size)
        return None
    if bias:
        shaped = _bias_shape(types, consts, bias, q)
        if shaped is None:
            return None
        block.bias, block.expand = bias, shaped[1]
    return block


def _scores(index: GraphIndex, name: str, reader: int, consts: Mapping[str, onnx.TensorProto],
            read: Read) -> tuple[int, float, list[int]] | None:
    """(the position of the MatMul computing Q Kᵀ, the product of the scalar scales after it, their
    positions) when ``name`` is that MatMul's output scaled by scalar constants, each read by the next alone."""
    factor, scaling = 1.0, []
    while True:
        at = index.producer.get(name)
        if at is None or not _only_for(index, name, reader):
            return None
        scaled = _scale_of(index, at, consts, read)
        if scaled is None:
            break
        scaling.append(at)
        factor *= scaled[1]
        name, reader = scaled[0], at
    at = _producer(index, name, "MatMul")
    return None if at is None else (at, factor, scaling)


def _bias_shape(types: Types, consts: Mapping[str, onnx.TensorProto], bias: str,
                q: _Head) -> tuple[str, list[int] | str | None] | None:
    """How the scores' additive ``bias`` becomes Attention's ``attention_bias`` (``[batch or 1, heads or 1,
    seq, seq]``): (bias, None) as it is; where its dim 2 is 1 (a padding mask ``[batch, 1, 1, seq]``),
    (bias, shape) broadcast to a static ``shape``, or (bias, x) to x's sequence length at run time;
    None where none is proven."""
    tensor = consts.get(bias)
    tp = helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims)) if tensor is not None else types.get(bias)
    dims, x_dims = tensor_dims(tp), tensor_dims(types.get(q.x))
    if dims is None or x_dims is None or len(dims) != 4 or _elem(tp) != _FLOAT:
        return None
    batch, seq = x_dims[0], x_dims[1]
    if not (dims[0] == 1 or _same_dim(dims[0], batch)) or dims[1] not in (1, q.heads) or not _same_dim(dims[3], seq):
        return None
    if _same_dim(dims[2], seq):
        return bias, None
    if dims[2] != 1:
        return None
    if all(isinstance(d, int) for d in (*dims, seq)):
        return bias, [int(dims[0]), int(dims[1]), int(seq), int(dims[3])]  # type: ignore[arg-type]
    return bias, q.x


def _head(index: GraphIndex, name: str, reader: int, perm: list[int], consts: Mapping[str, onnx.TensorProto],
          types: Types, read: Read) -> _Head | None:
    """Walk back from an operand of the scores or context MatMul to its projection: Transposes that
    make ``perm`` of the head split, at most one scalar scale, one Reshape into heads, the bias Add
    and the MatMul by a constant weight, each read by the next alone."""
    nodes: list[int] = []
    composite = [0, 1, 2, 3]
    factor, scaled, split = 1.0, False, None
    while True:
        at = index.producer.get(name)
        if at is None or not _only_for(index, name, reader):
            return None
        node = index.nodes[at]
        if node.domain not in _STANDARD or node.output[0] != name:
            return None
        if node.op_type == "Transpose" and split is None:
            own = list(_attr(node, "perm", []))  # type: ignore[call-overload]
            if sorted(own) != [0, 1, 2, 3]:
                return None
            composite = [own[c] for c in composite]
        elif node.op_type in ("Mul", "Div") and not scaled and _scale_of(index, at, consts, read) is not None:
            data, value = _scale_of(index, at, consts, read)  # type: ignore[misc]
            factor, scaled = value, True
            nodes.append(at)
            name, reader = data, at
            continue
        elif node.op_type == "Reshape" and split is None:
            if composite != perm or _attr(node, "allowzero", 0):
                return None
            split = at
        else:
            break
        nodes.append(at)
        name, reader = node.input[0], at
    projection = _projection(index, name, reader, consts, types, read)
    if projection is None or split is None:
        return None
    x, weight, bias, width, more, transposed = projection
    x_dims = tensor_dims(types.get(x))
    if x_dims is None or len(x_dims) != 3 or _elem(types.get(x)) != _FLOAT:
        return None
    target = _ints(consts, read, index.nodes[split].input[1])
    found = _split_heads(target, x_dims, width, flat=index.nodes[more[-1]].op_type == "Gemm")
    if found is None:
        return None
    return _Head(x, weight, bias, width, found[0], found[1], nodes + more, factor, transposed)


def _packed_heads(index: GraphIndex, scores_at: int, context_at: int, consts: Mapping[str, onnx.TensorProto],
                  types: Types, read: Read) -> tuple[_Head, _Head, _Head] | None:
    """Q, K and V taken from one projection ``[batch, seq, 3 · hidden]`` reshaped to ``[batch, seq, 3,
    heads, size]``, transposed by ``[2, 0, 3, 1, 4]`` and taken apart along its first axis (Gather 0, 1, 2,
    or a Split into three and Squeezes), as a vision transformer's ``qkv`` is exported: the projection's
    weight is already packed as Attention packs it."""
    scores, context = index.nodes[scores_at], index.nodes[context_at]
    found = [_packed_part(index, scores.input[0], scores_at, [0, 1, 2, 3], consts, read),
             _packed_part(index, scores.input[1], scores_at, [0, 1, 3, 2], consts, read),
             _packed_part(index, context.input[1], context_at, [0, 1, 2, 3], consts, read)]
    parts = [p for p in found if p is not None]
    if len(parts) != 3 or len({p[0] for p in parts}) != 1 or [p[1] for p in parts] != [0, 1, 2]:
        return None
    source, taker = parts[0][0], parts[0][3]
    readers = set(index.consumers.get(source, []))
    if source in index.output_set or readers != ({taker} if taker is not None else {p[2][0] for p in parts}):
        return None
    shared = [taker] if taker is not None else []
    transpose_at = _producer(index, source, "Transpose")
    if transpose_at is None or list(_attr(index.nodes[transpose_at], "perm", [])) != [2, 0, 3, 1, 4]:  # type: ignore[call-overload]
        return None
    split_name = index.nodes[transpose_at].input[0]
    reshape_at = _producer(index, split_name, "Reshape")
    if reshape_at is None or not _only_for(index, split_name, transpose_at) or _attr(index.nodes[reshape_at], "allowzero", 0):
        return None
    reshape = index.nodes[reshape_at]
    projection = _projection(index, reshape.input[0], reshape_at, consts, types, read)
    if projection is None or projection[5]:
        return None
    x, weight, bias, width, more, _ = projection
    x_dims = tensor_dims(types.get(x))
    target = _ints(consts, read, reshape.input[1])
    if x_dims is None or len(x_dims) != 3 or _elem(types.get(x)) != _FLOAT or width % 3 or target is None \
            or len(target) != 5 or target[2] != 3:
        return None
    split = _split_heads([*target[:2], *target[3:]], x_dims, width // 3, flat=index.nodes[more[-1]].op_type == "Gemm")
    if split is None:
        return None
    heads, size = split
    first = _Head(x, weight, bias, width // 3, heads, size, [*shared, transpose_at, reshape_at, *more, *parts[0][2]],
                  parts[0][4], packed=True)
    rest = [_Head(x, weight, bias, width // 3, heads, size, p[2], p[4], packed=True) for p in parts[1:]]
    return first, rest[0], rest[1]


def _packed_part(index: GraphIndex, name: str, reader: int, perm: list[int], consts: Mapping[str, onnx.TensorProto],
                 read: Read) -> tuple[str, int, list[int], int | None, float] | None:
    """(the ``[3, batch, heads, seq, size]`` tensor, which of the three, the positions from there to the
    operand, the Split taking it apart or None, the scale) when the operand ``name`` is one third of it,
    transposed by ``perm`` and scaled by at most one scalar constant."""
    nodes: list[int] = []
    composite = [0, 1, 2, 3]
    factor, scaled = 1.0, False
    while True:
        at = index.producer.get(name)
        if at is None or not _only_for(index, name, reader):
            return None
        node = index.nodes[at]
        if node.domain not in _STANDARD or node.output[0] != name:
            return None
        nodes.append(at)
        if node.op_type == "Transpose":
            own = list(_attr(node, "perm", []))  # type: ignore[call-overload]
            if sorted(own) != [0, 1, 2, 3]:
                return None
            composite = [own[c] for c in composite]
        elif node.op_type in ("Mul", "Div") and not scaled and _scale_of(index, at, consts, read) is not None:
            data, factor = _scale_of(index, at, consts, read)  # type: ignore[misc]
            scaled = True
            name, reader = data, at
            continue
        elif node.op_type == "Gather" and _attr(node, "axis", 0) == 0:
            which = consts.get(node.input[1])
            if which is None or len(which.dims) or composite != perm:
                return None
            return node.input[0], int(read(which)), nodes[::-1], None, factor
        elif node.op_type == "Squeeze" and composite == perm:
            axes = _attr(node, "axes", None)
            axes = _ints(consts, read, node.input[1]) if axes is None and len(node.input) > 1 else axes
            split_at = _producer_any(index, node.input[0], "Split")
            if list(axes or []) != [0] or split_at is None:  # type: ignore[call-overload]
                return None
            split = index.nodes[split_at]
            sizes = _attr(split, "split", None)
            sizes = _ints(consts, read, split.input[1]) if sizes is None and len(split.input) > 1 and split.input[1] \
                else sizes
            if _attr(split, "axis", 0) != 0 or len(split.output) != 3 or list(sizes or [1, 1, 1]) != [1, 1, 1]:  # type: ignore[call-overload]
                return None
            return split.input[0], list(split.output).index(node.input[0]), nodes[::-1], split_at, factor
        else:
            return None
        name, reader = node.input[0], at


def _producer_any(index: GraphIndex, name: str, op: str) -> int | None:
    """The position of the standard ``op`` node writing ``name`` as any of its outputs."""
    at = index.producer.get(name)
    return at if at is not None and index.nodes[at].op_type == op and index.nodes[at].domain in _STANDARD else None


def _projection(index: GraphIndex, name: str, reader: int, consts: Mapping[str, onnx.TensorProto], types: Types,
                read: Read) -> tuple[str, str, str | None, int, list[int], bool] | None:
    """(x, weight, bias or None, width, node positions, whether the weight is transposed) for ``name`` =
    ``MatMul(x, W) (+ b)``, or ``Gemm(Reshape(x, [batch · seq, hidden]), W, b)`` of a static x (what
    simplify's standard ``gemm`` pass makes of an attention's projections)."""
    gemm_at = _producer(index, name, "Gemm")
    if gemm_at is not None:
        return _gemm_projection(index, gemm_at, reader, consts, types, read)
    nodes: list[int] = []
    bias = None
    add_at = _producer(index, name, "Add")
    if add_at is not None:
        add = index.nodes[add_at]
        matmul_out = next((n for n in add.input if _producer(index, n, "MatMul") is not None), None)
        if matmul_out is None or not _only_for(index, name, reader):
            return None
        bias = _other(add, matmul_out)
        nodes.append(add_at)
        name, reader = matmul_out, add_at
    at = _producer(index, name, "MatMul")
    if at is None or not _only_for(index, name, reader):
        return None
    matmul = index.nodes[at]
    shape = _matrix(consts, matmul.input[1])
    if shape is None or matmul.input[0] in consts or (bias is not None and not _vector(consts, bias, shape[1])):
        return None
    nodes.append(at)
    return matmul.input[0], matmul.input[1], bias, shape[1], nodes, False


def _gemm_projection(index: GraphIndex, at: int, reader: int, consts: Mapping[str, onnx.TensorProto], types: Types,
                     read: Read) -> tuple[str, str, str | None, int, list[int], bool] | None:
    gemm = index.nodes[at]
    if not _only_for(index, gemm.output[0], reader) or len(gemm.input) < 2 or _attr(gemm, "alpha", 1.0) != 1.0 \
            or _attr(gemm, "beta", 1.0) != 1.0 or _attr(gemm, "transA", 0) != 0:
        return None
    transposed = bool(_attr(gemm, "transB", 0))
    shape = _matrix(consts, gemm.input[1])
    if shape is None:
        return None
    inner, width = (shape[1], shape[0]) if transposed else shape
    bias = gemm.input[2] if len(gemm.input) > 2 and gemm.input[2] else None
    if bias is not None and not _vector(consts, bias, width):
        return None
    flat_at = _producer(index, gemm.input[0], "Reshape")
    if flat_at is None:
        return None
    x = index.nodes[flat_at].input[0]
    dims = tensor_dims(types.get(x))
    target = _ints(consts, read, index.nodes[flat_at].input[1])
    if dims is None or len(dims) != 3 or not all(isinstance(d, int) and d > 0 for d in dims) or target is None \
            or len(target) != 2 or dims[2] != inner or target[1] not in (inner, -1) \
            or target[0] not in (-1, dims[0] * dims[1]) or target == [-1, -1]:  # type: ignore[operator]
        return None
    return x, gemm.input[1], bias, width, [at], transposed


def _split_heads(target: list[int] | None, x_dims: list[int | str], width: int, *,
                 flat: bool = False) -> tuple[int, int] | None:
    """(heads, head size) when the Reshape target splits ``[batch, seq, width]`` into ``[batch, seq,
    heads, size]`` at every batch and sequence length, else None. ``flat``: the Reshape reads a Gemm's
    ``[batch · seq, width]``, where a 0 copies that 2-D input's dims, not x's (``[0, -1, heads, size]``
    makes a sequence of 1)."""
    if target is None or len(target) != 4 or target.count(-1) > 1 or any(t < -1 for t in target) \
            or (flat and 0 in target[:2]):
        return None
    for t, dim in zip(target[:2], x_dims[:2]):
        if t not in (0, -1) and not (isinstance(dim, int) and t == dim):
            return None
    heads, size = target[2], target[3]
    if heads == -1 and size > 0 and width % size == 0:
        heads = width // size
    elif size == -1 and heads > 0 and width % heads == 0:
        size = width // heads
    if heads <= 0 or size <= 0 or heads * size != width:
        return None
    return heads, size


def _merge(index: GraphIndex, context_at: int, v: _Head, consts: Mapping[str, onnx.TensorProto], types: Types,
           read: Read) -> list[int] | None:
    """The positions of ``Transpose [0, 2, 1, 3]`` and the Reshape to ``[batch, seq, heads · size]`` after
    the context MatMul (the Reshape last), or None."""
    context = index.nodes[context_at]
    transpose_at = index.sole_reader(context.output[0])
    if transpose_at is None:
        return None
    transpose = index.nodes[transpose_at]
    if transpose.op_type != "Transpose" or transpose.domain not in _STANDARD \
            or list(_attr(transpose, "perm", [])) != [0, 2, 1, 3]:  # type: ignore[call-overload]
        return None
    reshape_at = index.sole_reader(transpose.output[0])
    if reshape_at is None:
        return None
    reshape = index.nodes[reshape_at]
    if reshape.op_type != "Reshape" or reshape.domain not in _STANDARD or reshape.input[0] != transpose.output[0] \
            or _attr(reshape, "allowzero", 0):
        return None
    target = _ints(consts, read, reshape.input[1])
    x_dims = tensor_dims(types.get(v.x)) or []
    if target is None or len(target) != 3 or target.count(-1) > 1 or len(x_dims) != 3:
        return None
    for t, dim in zip(target[:2], x_dims[:2]):
        if t not in (0, -1) and not (isinstance(dim, int) and t == dim):
            return None
    if target[2] not in (-1, v.width):
        return None
    return [transpose_at, reshape_at]


# ------------------------------------------------------------------------------------------ Gelu


def fuse_gelu(graph: onnx.GraphProto, consts: Mapping[str, onnx.TensorProto], types: Types, read: Read,
              taken: set[str]) -> int:
    """Replace each ``x · 0.5 · (1 + erf(x / √2))`` by ``com.microsoft::Gelu`` or, where x adds a 1-D
    constant bias, ``BiasGelu``; and each ``x · 0.5 · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`` by
    ``FastGelu`` (the bias as its second input) (module docstring).

    Returns:
        How many nodes went.
    """
    index = GraphIndex(graph)
    replaced: dict[int, onnx.NodeProto] = {}
    removed: list[int] = []
    claimed: set[int] = set()
    for i, node in enumerate(index.nodes):
        if node.op_type not in ("Erf", "Tanh") or node.domain not in _STANDARD:
            continue
        found = _gelu_at(index, i, consts, read)
        if found is None or claimed & set(found[1]):
            continue
        x, nodes = found
        claimed.update(nodes)
        last = nodes[-1]
        out = index.nodes[last].output[0]
        name = index.nodes[last].name or out
        bias = _bias_of(index, x, nodes, consts, types)
        tanh = node.op_type == "Tanh"
        if bias is not None and bias[2] not in claimed:
            a, b, add_at = bias
            claimed.add(add_at)
            op = "FastGelu" if tanh else "BiasGelu"
            replaced[last] = helper.make_node(op, [a, b], [out], name=fresh_name(f"{name}/{op}", taken), domain=DOMAIN)
            removed.append(add_at)
        else:
            op = "FastGelu" if tanh else "Gelu"
            replaced[last] = helper.make_node(op, [x], [out], name=fresh_name(f"{name}/{op}", taken), domain=DOMAIN)
        removed.extend(n for n in nodes if n != last)
    return _replace(graph, index, replaced, removed) if replaced else 0


def _gelu_at(index: GraphIndex, at: int, consts: Mapping[str, onnx.TensorProto],
             read: Read) -> tuple[str, list[int]] | None:
    """(x, the pattern's node positions with the one writing the result last) around the Erf or Tanh at ``at``."""
    inner = _erf_inner(index, at, consts, read) if index.nodes[at].op_type == "Erf" else _tanh_inner(index, at, consts, read)
    if inner is None:
        return None
    x, nodes = inner
    function = index.nodes[at].output[0]
    plus_at = index.sole_reader(function)
    if plus_at is None:
        return None
    plus = index.nodes[plus_at]
    if plus.op_type != "Add" or plus.domain not in _STANDARD or _scalar(consts, read, _other(plus, function)) != 1.0:
        return None
    nodes.append(plus_at)
    # x · (1 + f) · 0.5 in one of three associations
    first_at = index.sole_reader(plus.output[0])
    if first_at is None:
        return None
    first = index.nodes[first_at]
    if first.op_type != "Mul" or first.domain not in _STANDARD or len(first.input) != 2:
        return None
    operand = _other(first, plus.output[0])
    if operand == x or _scalar(consts, read, operand) == 0.5:  # (x · s) · 0.5 or (s · 0.5) · x
        second_at = index.sole_reader(first.output[0])
        if second_at is None:
            return None
        second = index.nodes[second_at]
        wanted = 0.5 if operand == x else None
        rest = _other(second, first.output[0]) if second.op_type == "Mul" and len(second.input) == 2 else None
        if second.domain not in _STANDARD or rest is None or \
                (wanted is not None and _scalar(consts, read, rest) != wanted) or (wanted is None and rest != x):
            return None
        return x, [*nodes, first_at, second_at]
    half_at = _producer(index, operand, "Mul")  # (x · 0.5) · s
    if half_at is None or not _only_for(index, operand, first_at):
        return None
    half = index.nodes[half_at]
    if x not in half.input or _scalar(consts, read, _other(half, x)) != 0.5:
        return None
    return x, [*nodes, half_at, first_at]


def _erf_inner(index: GraphIndex, erf_at: int, consts: Mapping[str, onnx.TensorProto],
               read: Read) -> tuple[str, list[int]] | None:
    """(x, positions) for ``erf(x / √2)`` (or ``erf(x · 1/√2)``) at ``erf_at``."""
    erf = index.nodes[erf_at]
    scaled_at = index.producer.get(erf.input[0])
    if scaled_at is None or not _only_for(index, erf.input[0], erf_at):
        return None
    scaled = _scale_of(index, scaled_at, consts, read)
    if scaled is None:
        return None
    x, node = scaled[0], index.nodes[scaled_at]
    constant = _scalar(consts, read, node.input[1] if node.op_type == "Div" else _other(node, x))
    if constant != (_SQRT2 if node.op_type == "Div" else _RSQRT2):
        return None
    return x, [scaled_at, erf_at]


def _tanh_inner(index: GraphIndex, tanh_at: int, consts: Mapping[str, onnx.TensorProto],
                read: Read) -> tuple[str, list[int]] | None:
    """(x, positions) for ``tanh(√(2/π) · (x + 0.044715 · x³))`` at ``tanh_at`` (the cube a ``Pow(x, 3)``
    or ``x · (x · x)``)."""
    inner = index.nodes[tanh_at].input[0]
    scaled_at = _producer(index, inner, "Mul")
    if scaled_at is None or not _only_for(index, inner, tanh_at):
        return None
    scaled = _scale_of(index, scaled_at, consts, read)
    if scaled is None or _scalar(consts, read, _other(index.nodes[scaled_at], scaled[0])) != _SQRT_2_PI:
        return None
    sum_at = _producer(index, scaled[0], "Add")
    if sum_at is None or not _only_for(index, scaled[0], scaled_at):
        return None
    total = index.nodes[sum_at]
    for x, term in ((total.input[0], total.input[1]), (total.input[1], total.input[0])):
        term_at = _producer(index, term, "Mul")
        if term_at is None or not _only_for(index, term, sum_at):
            continue
        cubic = _scale_of(index, term_at, consts, read)
        if cubic is None or index.nodes[term_at].op_type != "Mul" \
                or _scalar(consts, read, _other(index.nodes[term_at], cubic[0])) != _KAPPA:
            continue
        cube = _cube_of(index, cubic[0], term_at, x, consts, read)
        if cube is not None:
            return x, [*cube, term_at, sum_at, scaled_at, tanh_at]
    return None


def _cube_of(index: GraphIndex, name: str, reader: int, x: str, consts: Mapping[str, onnx.TensorProto],
             read: Read) -> list[int] | None:
    """The positions computing ``name`` = x³ (``Pow(x, 3)``, or ``x · (x · x)`` either way round)."""
    at = _producer(index, name, ("Pow", "Mul"))
    if at is None or not _only_for(index, name, reader):
        return None
    node = index.nodes[at]
    if node.op_type == "Pow":
        return [at] if node.input[0] == x and _scalar(consts, read, node.input[1]) == 3.0 else None
    if x not in node.input:
        return None
    square = _other(node, x) if list(node.input) != [x, x] else None
    square_at = _producer(index, square, "Mul") if square else None
    if square_at is None or list(index.nodes[square_at].input) != [x, x] or not _only_for(index, square, at):  # type: ignore[arg-type]
        return None
    return [square_at, at]


def _bias_of(index: GraphIndex, x: str, nodes: list[int], consts: Mapping[str, onnx.TensorProto],
             types: Types) -> tuple[str, str, int] | None:
    """(a, b, the Add's position) when x = Add(a, b) with b a 1-D constant of a's last dim, and x is read
    by the Gelu's nodes alone."""
    add_at = _producer(index, x, "Add")
    if add_at is None or x in index.output_set or not set(index.consumers.get(x, [])) <= set(nodes):
        return None
    add = index.nodes[add_at]
    for a, b in ((add.input[0], add.input[1]), (add.input[1], add.input[0])):
        tensor = consts.get(b)
        if a in consts or tensor is None or tensor.data_type != _FLOAT or len(tensor.dims) != 1:
            continue
        width = int(tensor.dims[0])
        matmul_at = _producer(index, a, "MatMul")
        shape = _matrix(consts, index.nodes[matmul_at].input[1]) if matmul_at is not None else None
        dims = tensor_dims(types.get(a))
        if (shape is not None and shape[1] == width) or (dims and dims[-1] == width and _elem(types.get(a)) == _FLOAT):
            return a, b, add_at
    return None


# ------------------------------------------------------------------------ Add + LayerNormalization


def fuse_skip_layernorm(graph: onnx.GraphProto, consts: Mapping[str, onnx.TensorProto], types: Types, read: Read,
                        taken: set[str]) -> int:
    """Replace a layer normalization over the last axis of ``Add(a, b)`` (a LayerNormalization, or the
    decomposition exporters write below opset 17) by ``com.microsoft::SkipLayerNormalization`` (module
    docstring).

    Returns:
        How many nodes went.
    """
    index = GraphIndex(graph)
    replaced: dict[int, onnx.NodeProto] = {}
    removed: list[int] = []
    claimed: set[int] = set()
    for i, node in enumerate(index.nodes):
        if node.domain not in _STANDARD or node.op_type not in ("LayerNormalization", "Add"):
            continue
        norm = _norm_at(index, i, consts, read)
        found = _skip_at(index, norm, consts, types) if norm is not None else None
        if found is None or claimed & set(found[1]):
            continue
        inputs, nodes, sum_at = found
        claimed.update(nodes)
        outputs = [node.output[0]]
        if sum_at is not None:
            outputs += ["", "", index.nodes[sum_at].output[0]]
        replaced[i] = helper.make_node("SkipLayerNormalization", inputs, outputs, domain=DOMAIN,
                                       name=fresh_name(f"{node.name or node.output[0]}/SkipLayerNormalization", taken),
                                       epsilon=norm.epsilon)  # type: ignore[union-attr]
        removed.extend(n for n in nodes if n != i)
    return _replace(graph, index, replaced, removed) if replaced else 0


@dataclass
class _Norm:
    """A layer normalization over the last axis: its input, scale, bias ("" for none), epsilon and nodes."""

    x: str
    scale: str
    bias: str
    epsilon: float
    nodes: list[int]


def _norm_at(index: GraphIndex, i: int, consts: Mapping[str, onnx.TensorProto], read: Read) -> _Norm | None:
    """The layer normalization whose last node is at ``i``: a LayerNormalization (axis -1 or 2, float32
    statistics), or ``(x - mean) / sqrt(var + eps) * scale + bias`` with both means ReduceMeans over
    the last axis keeping dims, the square a ``Pow(d, 2)`` or ``Mul(d, d)``, each node read by the next alone."""
    node = index.nodes[i]
    if node.op_type == "LayerNormalization":
        if _attr(node, "axis", -1) not in (-1, 2) or _attr(node, "stash_type", 1) != 1 or len(node.input) < 2 \
                or any(o for o in node.output[1:]):
            return None
        return _Norm(node.input[0], node.input[1], node.input[2] if len(node.input) > 2 else "",
                     float(_attr(node, "epsilon", 1e-5)), [i])  # type: ignore[arg-type]
    if len(node.input) != 2:
        return None
    for scaled, bias in ((node.input[0], node.input[1]), (node.input[1], node.input[0])):
        mul_at = _producer(index, scaled, "Mul")
        tensor = consts.get(bias)
        if mul_at is None or tensor is None or len(tensor.dims) != 1 or not _only_for(index, scaled, i):
            continue
        mul = index.nodes[mul_at]
        for normed, scale in ((mul.input[0], mul.input[1]), (mul.input[1], mul.input[0])):
            found = _normalized(index, normed, mul_at, consts, read)
            scale_tensor = consts.get(scale)
            if found is not None and scale_tensor is not None and len(scale_tensor.dims) == 1:
                x, epsilon, nodes = found
                return _Norm(x, scale, bias, epsilon, [*nodes, mul_at, i])
    return None


def _normalized(index: GraphIndex, name: str, reader: int, consts: Mapping[str, onnx.TensorProto],
                read: Read) -> tuple[str, float, list[int]] | None:
    """(x, epsilon, positions) when ``name`` is ``Div(x - mean(x), Sqrt(mean((x - mean(x))²) + eps))``."""
    div_at = _producer(index, name, "Div")
    if div_at is None or not _only_for(index, name, reader):
        return None
    centered, std = index.nodes[div_at].input
    sqrt_at = _producer(index, std, "Sqrt")
    plus_at = _producer(index, index.nodes[sqrt_at].input[0], "Add") if sqrt_at is not None else None
    if sqrt_at is None or plus_at is None or not _only_for(index, std, div_at) \
            or not _only_for(index, index.nodes[sqrt_at].input[0], sqrt_at):
        return None
    plus = index.nodes[plus_at]
    var = next((n for n in plus.input if _producer(index, n, "ReduceMean") is not None), None)
    epsilon = _scalar(consts, read, _other(plus, var)) if var is not None else None
    if var is None or epsilon is None or not _only_for(index, var, plus_at):
        return None
    var_at = index.producer[var]
    square = index.nodes[var_at].input[0]
    square_at = _producer(index, square, ("Pow", "Mul"))
    if not _mean_over_last(index.nodes[var_at], consts, read) or square_at is None \
            or not _only_for(index, square, var_at):
        return None
    squaring = index.nodes[square_at]
    if squaring.op_type == "Pow" and not (squaring.input[0] == centered and _scalar(consts, read, squaring.input[1]) == 2.0):
        return None
    if squaring.op_type == "Mul" and list(squaring.input) != [centered, centered]:
        return None
    sub_at = _producer(index, centered, "Sub")
    if sub_at is None or set(index.consumers.get(centered, [])) != {square_at, div_at} or centered in index.output_set:
        return None
    x, mean = index.nodes[sub_at].input
    mean_at = _producer(index, mean, "ReduceMean")
    if mean_at is None or index.nodes[mean_at].input[0] != x or not _only_for(index, mean, sub_at) \
            or not _mean_over_last(index.nodes[mean_at], consts, read):
        return None
    return x, epsilon, [mean_at, sub_at, square_at, var_at, plus_at, sqrt_at, div_at]


def _mean_over_last(node: onnx.NodeProto, consts: Mapping[str, onnx.TensorProto], read: Read) -> bool:
    """Whether a ReduceMean averages over the last axis of a rank-3 input alone, keeping its dims (its
    axes an attribute before opset 18, an input from it)."""
    if _attr(node, "keepdims", 1) != 1 or _attr(node, "noop_with_empty_axes", 0):
        return False
    axes = _attr(node, "axes", None)
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = _ints(consts, read, node.input[1])
    return axes is not None and list(axes) in ([-1], [2])  # type: ignore[call-overload]


def _skip_at(index: GraphIndex, norm: _Norm, consts: Mapping[str, onnx.TensorProto],
             types: Types) -> tuple[list[str], list[int], int | None] | None:
    """(SkipLayerNormalization's inputs, positions [the normalization's, the Add, the bias Add?], the Add's
    position when its sum is read elsewhere too) for the normalization ``norm`` of an Add."""
    add_at = _producer(index, norm.x, "Add")
    if add_at is None or norm.x in index.output_set:
        return None
    keep_sum = not set(index.consumers.get(norm.x, [])) <= set(norm.nodes)
    add = index.nodes[add_at]
    a, b = add.input[0], add.input[1]
    da, db = tensor_dims(types.get(a)), tensor_dims(types.get(b))
    if a == b or da is None or db is None or len(da) != 3 or len(da) != len(db) \
            or not all(_same_dim(x, y) for x, y in zip(da, db)) or not isinstance(da[-1], int) \
            or _elem(types.get(a)) != _FLOAT or _elem(types.get(b)) != _FLOAT:
        return None
    hidden = da[-1]
    if not _vector(consts, norm.scale, hidden) or (norm.bias and not _vector(consts, norm.bias, hidden)):
        return None
    nodes = [*norm.nodes, add_at]
    inputs = [a, b, norm.scale, norm.bias]
    for side, other in ((a, b), (b, a)):
        bias_at = _producer(index, side, "Add")
        if bias_at is None or not _only_for(index, side, add_at):
            continue
        bias_add = index.nodes[bias_at]
        for data, bias in ((bias_add.input[0], bias_add.input[1]), (bias_add.input[1], bias_add.input[0])):
            if data not in consts and _vector(consts, bias, hidden) and _same_shape(types, data, side):
                nodes.append(bias_at)
                inputs = [data, other, norm.scale, norm.bias, bias]
                break
        if len(inputs) == 5:
            break
    if not norm.bias and len(inputs) == 4:
        inputs = inputs[:3]
    return inputs, nodes, add_at if keep_sum else None


def _same_shape(types: Types, a: str, b: str) -> bool:
    """Whether ``a`` is proven of ``b``'s shape (a bias Add that does not broadcast its data input)."""
    da, db = tensor_dims(types.get(a)), tensor_dims(types.get(b))
    return da is not None and db is not None and len(da) == len(db) and all(_same_dim(x, y) for x, y in zip(da, db))
