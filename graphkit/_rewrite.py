"""Rewrites of simplify that replace a pattern by fewer standard nodes: MatMul + Add into Gemm, and an
If whose condition is a constant by the branch it takes.

Both work on one graph in place and return how many nodes they removed; ``graphkit._simplify`` runs
them on every graph (If/Loop/Scan bodies too) as its ``gemm`` and ``branches`` passes.

MatMul + Add becomes ``Gemm(A, B, C)`` (alpha = beta = 1, no transposes) only where that is the same
computation at every input size:

- A has rank 2 (proven by inference, not by value_info) and B is a 2-D constant; Gemm multiplies
  matrices only, while MatMul broadcasts batch dims (``[batch, seq, k]`` inputs keep MatMul).
- C is a constant that broadcasts unidirectionally to the product's ``(M, N)``: ``[N]``, ``[1]``,
  ``[1, N]``, ``[1, 1]``, or ``[M, N]`` / ``[M, 1]`` when M is a proven size; a scalar too. Add's own
  broadcasting could also grow the product (``[M, N] + [K, M, N]``), which Gemm cannot: refused.
- A, B and C are float or double (Gemm's types at every opset from 7, where C broadcasts; ONNX
  Runtime's CPU Gemm has exactly these two), and the model imports the default domain at 7 or above.
- The MatMul's output is read by that Add alone and is no graph output.

onnxoptimizer's ``fuse_matmul_add_bias_into_gemm`` takes the same cases (rank-2 operands, a bias of
``[N]`` or ``[1|M, N]``); onnxslim also takes rank-3 inputs by wrapping Gemm in two Reshapes, which
does not make the graph smaller. Where several projections of one input of static dims ``[..., K]``
are each reshaped (an attention's Q, K, V heads), one ``Reshape(x, [M, K])`` feeds a Gemm for each
and each head Reshape reads that Gemm directly (``fuse_gemm_groups``): 3n nodes become 2n + 1, as
onnxsim's batched Gemm fusion does.

An If whose condition is a constant (an initializer, or an enclosing graph's) is replaced by the
nodes of the branch it takes: the branch's names that clash with any name of the model get fresh
ones (its nested bodies' reads follow, unless they shadow the name), its initializers and value_info
move to the graph, its outputs are written under the If's output names (where the branch passes a
tensor through, the If's readers read that tensor; an Identity writes it when it is a graph output).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

import numpy as np
import onnx
from onnx import helper

from graphkit._edit._common import _fresh, _rename_scope
from graphkit._graph import GraphIndex, subgraphs
from graphkit._typing import tensor_dims

__all__ = ["fuse_gemm_groups", "fuse_gemms", "gemm_candidates", "inline_constant_ifs"]

_STANDARD = ("", "ai.onnx")
#: Gemm's element types that ONNX Runtime's CPU kernel has, at every opset from 7 on.
_GEMM_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE})
#: Gemm broadcasts C unidirectionally from opset 7 (earlier versions need a ``broadcast`` attribute).
_GEMM_OPSET = 7


def gemm_candidates(graph: onnx.GraphProto, consts: Mapping[str, onnx.TensorProto]) -> list[str]:
    """The tensors whose types ``fuse_gemms`` and ``fuse_gemm_groups`` need: each candidate MatMul's data
    input and output, and every Reshape's output."""
    names: list[str] = []
    for node in graph.node:
        if node.op_type == "MatMul" and node.domain in _STANDARD and len(node.input) == 2 \
                and node.input[1] in consts and node.input[0] not in consts:
            names.extend((node.input[0], node.output[0]))
        elif node.op_type == "Reshape" and node.domain in _STANDARD and node.output:
            names.append(node.output[0])
    return names if any(n.op_type == "MatMul" for n in graph.node) else []


def fuse_gemms(graph: onnx.GraphProto, consts: Mapping[str, onnx.TensorProto],
               types: Mapping[str, onnx.TypeProto], opset: int) -> int:
    """Replace ``Add(MatMul(A, B), C)`` by ``Gemm(A, B, C)`` where exact (see the module docstring).

    Args:
        graph: The graph, changed in place.
        consts: The constants its nodes can read (name → initializer).
        types: Inferred types of the tensors ``gemm_candidates`` names.
        opset: The model's default-domain opset version.

    Returns:
        How many nodes went (one per fusion).
    """
    if opset < _GEMM_OPSET:
        return 0
    index = GraphIndex(graph)
    replaced: dict[int, onnx.NodeProto] = {}
    gone: set[int] = set()
    for i, node in enumerate(index.nodes):
        if node.op_type != "MatMul" or node.domain not in _STANDARD or len(node.input) != 2 or len(node.output) != 1:
            continue
        product = node.output[0]
        readers = index.consumers.get(product, [])
        if len(readers) != 1 or product in index.output_set or readers[0] in replaced:
            continue
        add = index.nodes[readers[0]]
        if add.op_type != "Add" or add.domain not in _STANDARD or len(add.input) != 2 or add.input[0] == add.input[1]:
            continue
        bias = add.input[1] if add.input[0] == product else add.input[0]
        if not _fusable(node, bias, consts, types):
            continue
        gemm = helper.make_node("Gemm", [node.input[0], node.input[1], bias], list(add.output),
                                name=add.name or node.name)
        replaced[readers[0]] = gemm
        gone.add(i)
    if not gone:
        return 0
    kept = [replaced.get(i, n) for i, n in enumerate(index.nodes) if i not in gone]
    del graph.node[:]
    graph.node.extend(kept)
    dropped = {index.nodes[i].output[0] for i in gone}
    kept_info = [v for v in graph.value_info if v.name not in dropped]
    del graph.value_info[:]
    graph.value_info.extend(kept_info)
    return len(gone)


def fuse_gemm_groups(graph: onnx.GraphProto, consts: Mapping[str, onnx.TensorProto],
                     types: Mapping[str, onnx.TypeProto], opset: int, taken: set[str]) -> int:
    """Projections of one input of static dims ``[..., K]`` (rank 3 or more) by several ``Add(MatMul(x, W),
    b)``, each read by a Reshape alone (the attention's Q, K and V heads): one ``Reshape(x, [M, K])``
    feeds a Gemm per projection, and each Reshape, given its static output shape as target, reads the
    Gemm's ``[M, N]``. n projections: 3n nodes become 2n + 1. Exact where every dim is static (proven by
    inference), the bias is ``[N]`` or ``[1]``, and types are as for ``fuse_gemms``.

    Returns:
        How many nodes went.
    """
    if opset < _GEMM_OPSET:
        return 0
    index = GraphIndex(graph)
    groups: dict[str, list[tuple[int, int, int, list[int]]]] = {}
    for i, node in enumerate(index.nodes):
        found = _projection(index, i, consts, types)
        if found is not None:
            groups.setdefault(node.input[0], []).append((i, *found))
    groups = {x: members for x, members in groups.items() if len(members) > 1}
    if not groups:
        return 0
    inserted: dict[int, onnx.NodeProto] = {}
    replaced: dict[int, onnx.NodeProto] = {}
    gone: set[int] = set()
    dropped: set[str] = set()
    for x, members in groups.items():
        dims = [int(d) for d in _tensor_dims(types.get(x), consts[index.nodes[members[0][0]].input[1]].data_type)
                or []]  # (_projection proved them static)
        flat_shape = _fresh(f"{x}/2d_shape", taken)
        flat = _fresh(f"{x}/2d", taken)
        graph.initializer.append(helper.make_tensor(flat_shape, onnx.TensorProto.INT64, [2],
                                                   [int(np.prod(dims[:-1])), int(dims[-1])]))
        first = min(m[0] for m in members)
        inserted[first] = helper.make_node("Reshape", [x, flat_shape], [flat], name=flat)
        for matmul_at, add_at, reshape_at, target in members:
            matmul, add, reshape = index.nodes[matmul_at], index.nodes[add_at], index.nodes[reshape_at]
            product = _fresh(f"{add.output[0]}/2d", taken)
            bias = add.input[1] if add.input[0] == matmul.output[0] else add.input[0]
            replaced[add_at] = helper.make_node("Gemm", [flat, matmul.input[1], bias], [product],
                                                name=add.name or matmul.name)
            target_name = _fresh(f"{reshape.output[0]}/shape", taken)
            graph.initializer.append(helper.make_tensor(target_name, onnx.TensorProto.INT64, [len(target)], target))
            reshape.input[0], reshape.input[1] = product, target_name
            gone.add(matmul_at)
            dropped.update((matmul.output[0], add.output[0]))
    nodes: list[onnx.NodeProto] = []
    for i, node in enumerate(index.nodes):
        if i in inserted:
            nodes.append(inserted[i])
        if i not in gone:
            nodes.append(replaced.get(i, node))
    del graph.node[:]
    graph.node.extend(nodes)
    kept_info = [v for v in graph.value_info if v.name not in dropped]
    del graph.value_info[:]
    graph.value_info.extend(kept_info)
    return len(index.nodes) - len(nodes)


def _projection(index: GraphIndex, i: int, consts: Mapping[str, onnx.TensorProto],
                types: Mapping[str, onnx.TypeProto]) -> tuple[int, int, list[int]] | None:
    """(Add, Reshape positions, the Reshape's static output dims) for a MatMul at ``i`` that projects a
    static ``[..., K]`` input, adds a ``[N]`` bias and is reshaped, each read by the next alone."""
    node = index.nodes[i]
    if node.op_type != "MatMul" or node.domain not in _STANDARD or len(node.input) != 2 or len(node.output) != 1:
        return None
    weight = consts.get(node.input[1])
    if weight is None or node.input[0] in consts or len(weight.dims) != 2 or weight.data_type not in _GEMM_TYPES:
        return None
    dims = _tensor_dims(types.get(node.input[0]), weight.data_type)
    if dims is None or len(dims) < 3 or not all(isinstance(d, int) and d > 0 for d in dims) \
            or dims[-1] != weight.dims[0]:
        return None
    add_at = index.sole_reader(node.output[0])
    add = index.nodes[add_at] if add_at is not None else None
    if add is None or add.op_type != "Add" or add.domain not in _STANDARD or len(add.input) != 2:
        return None
    bias = consts.get(add.input[1] if add.input[0] == node.output[0] else add.input[0])
    if bias is None or bias.data_type != weight.data_type or list(bias.dims) not in ([weight.dims[1]], [1]):
        return None
    reshape_at = index.sole_reader(add.output[0])
    reshape = index.nodes[reshape_at] if reshape_at is not None else None
    if reshape is None or reshape.op_type != "Reshape" or reshape.domain not in _STANDARD \
            or reshape.input[0] != add.output[0]:
        return None
    out = _tensor_dims(types.get(reshape.output[0]), weight.data_type)
    if out is None or not out or not all(isinstance(d, int) and d > 0 for d in out):
        return None
    if add_at is None or reshape_at is None:
        return None
    return add_at, reshape_at, [int(d) for d in out]


def _fusable(matmul: onnx.NodeProto, bias: str, consts: Mapping[str, onnx.TensorProto],
             types: Mapping[str, onnx.TypeProto]) -> bool:
    data, weight_name = matmul.input
    weight, c = consts.get(weight_name), consts.get(bias)
    if weight is None or c is None or data in consts or len(weight.dims) != 2:
        return False
    if weight.data_type not in _GEMM_TYPES or c.data_type != weight.data_type:
        return False
    a = _tensor_dims(types.get(data), weight.data_type)
    if a is None or len(a) != 2 or (isinstance(a[1], int) and a[1] != weight.dims[0]):
        return False
    return _broadcasts_to(list(c.dims), a[0], int(weight.dims[1]))


def _tensor_dims(tp: onnx.TypeProto | None, elem: int) -> list[int | str] | None:
    """The dims of a tensor type of element type ``elem`` (a size, or a name/"?" for others), else None."""
    return tensor_dims(tp) if tp is not None and tp.tensor_type.elem_type == elem else None


def _broadcasts_to(dims: list[int], m: int | str, n: int) -> bool:
    """Whether a constant of ``dims`` broadcasts unidirectionally to ``(m, n)`` (so Add gives ``(m, n)``)."""
    if len(dims) > 2:
        return False
    padded = [1] * (2 - len(dims)) + dims
    rows_ok = padded[0] == 1 or (isinstance(m, int) and padded[0] == m)
    return rows_ok and padded[1] in (1, n)


# ---------------------------------------------------------------------------- If with a constant condition


def inline_constant_ifs(graph: onnx.GraphProto, consts: Mapping[str, onnx.TensorProto],
                        value_of: Callable[[onnx.TensorProto], np.ndarray], top: onnx.GraphProto) -> int:
    """Replace each If whose condition is a constant by the nodes of the branch it takes.

    Args:
        graph: The graph, changed in place.
        consts: The constants its nodes can read (name → initializer).
        value_of: Reads a constant's value.
        top: The model's main graph (``graph`` or one holding it): a branch's name that any other
            part of the model uses gets a fresh one.

    Returns:
        How many nodes went (the If, less the Identity nodes added for passed-through outputs).
    """
    count = 0
    at = 0
    while at < len(graph.node):
        node = graph.node[at]
        branch = _taken_branch(node, consts, value_of)
        if branch is None or len(branch.sparse_initializer) or len(branch.output) != len(node.output):
            at += 1
            continue
        added = _inline(graph, at, node, branch, _names_outside(top, node))
        count += 1 - added
        at += len(branch.node) + added  # (the inlined nodes hold no If of this graph's scope to look at again)
    return count


def _taken_branch(node: onnx.NodeProto, consts: Mapping[str, onnx.TensorProto],
                  value_of: Callable[[onnx.TensorProto], np.ndarray]) -> onnx.GraphProto | None:
    if node.op_type != "If" or node.domain not in _STANDARD or len(node.input) != 1 or node.input[0] not in consts:
        return None
    condition = consts[node.input[0]]
    if condition.data_type != onnx.TensorProto.BOOL or int(np.prod(condition.dims, dtype=np.int64)) != 1:
        return None
    wanted = "then_branch" if bool(np.asarray(value_of(condition)).reshape(-1)[0]) else "else_branch"
    return next((a.g for a in node.attribute if a.name == wanted), None)


def _names_outside(graph: onnx.GraphProto, skip: onnx.NodeProto) -> set[str]:
    """Every tensor name of ``graph`` and its bodies at any depth, except inside ``skip``'s bodies."""
    names = {v.name for v in (*graph.input, *graph.output, *graph.value_info)}
    names.update(t.name for t in graph.initializer)
    names.update(s.values.name for s in graph.sparse_initializer)
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        if node is not skip:
            for sub in subgraphs(node):
                names |= _names_outside(sub, skip)
    names.discard("")
    return names


def _inline(graph: onnx.GraphProto, at: int, node: onnx.NodeProto, branch: onnx.GraphProto, taken: set[str]) -> int:
    """Put a copy of ``branch`` in the place of the If at ``at``; returns how many Identity nodes it added."""
    body = onnx.GraphProto()
    body.CopyFrom(branch)
    own = GraphIndex(body).defined
    _rename_scope(body, {name: _fresh(name, taken) for name in sorted(own) if name in taken})
    produced = {o for n in body.node for o in n.output if o}
    written = Counter(v.name for v in body.output)
    graph_outputs = {v.name for v in graph.output}
    renamed: dict[str, str] = {}
    rewired: dict[str, str] = {}
    identities: list[onnx.NodeProto] = []
    for value, target in zip(body.output, node.output):
        if not target:
            continue
        if value.name in produced and written[value.name] == 1:
            renamed[value.name] = target  # (the branch's node writes the If's output itself)
        elif target not in graph_outputs:  # (an outer tensor, an initializer, a tensor output twice)
            rewired[target] = value.name
        else:
            identities.append(helper.make_node("Identity", [value.name], [target],
                                               name=_fresh(f"{node.name or 'If'}/{target}", taken)))
    _rename_scope(body, renamed, outputs=False)
    produced = {renamed.get(name, name) for name in produced}
    nodes = [*body.node, *identities]
    del graph.node[at]
    for offset, inner in enumerate(nodes):
        graph.node.insert(at + offset, inner)
    graph.initializer.extend(body.initializer)
    if rewired:  # (readers, nested bodies' included, read the passed-through tensor)
        _rename_scope(graph, rewired, defs=False, outputs=False)
        kept = [v for v in graph.value_info if v.name not in rewired]
        del graph.value_info[:]
        graph.value_info.extend(kept)
    declared = {v.name for v in (*graph.value_info, *graph.output)}
    graph.value_info.extend(v for v in body.value_info if v.name in produced and v.name not in declared)
    return len(identities)
