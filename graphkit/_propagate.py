"""Exact type propagation for the simplest standard ops, in plain Python.

ONNX shape inference types a tensor by walking every node upstream of it. For the commonest ops
(elementwise unary, broadcasting arithmetic, comparisons and logic, Cast) the result is fixed by
the input types alone, and computing it in Python costs less than building the weightless graph
copy that ONNX's C++ inference needs. This module does that for those ops only, and gives up
(returns None) as soon as anything falls outside what it knows how to type *exactly as ONNX shape
inference would*: another op or domain, an old opset, differing element types, a dim that is
neither a size nor a name, or two different dim names meeting in a broadcast. Callers then fall
back to ONNX shape inference, so giving up is always safe; the tests compare both on random graphs.

A type is ``(elem_type, dims)`` with dims a tuple of ints (sizes) and strs (dim names).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import onnx

__all__ = ["FastType", "SUPPORTED_OPS", "Typer", "node_type", "to_type_proto", "type_of"]

FastType = tuple[int, tuple[int | str, ...]]

_BOOL = onnx.TensorProto.BOOL

#: Ops whose single output has the type (element type and shape) of their first input.
_SAME_AS_INPUT = frozenset({
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Celu", "Cos", "Cosh", "Elu", "Erf",
    "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish", "Identity", "LeakyRelu", "Log",
    "Mish", "Neg", "Reciprocal", "Relu", "Round", "Selu", "Sigmoid", "Sign", "Sin", "Sinh",
    "Softplus", "Softsign", "Sqrt", "Tan", "Tanh", "ThresholdedRelu", "BitwiseNot",
})  # (each is typed only where the model's opset defines it: see _defined)

#: Ops whose output has the broadcast shape of all inputs and the (common) element type of the inputs.
_BROADCAST = frozenset({
    "Add", "Sub", "Mul", "Div", "Max", "Min", "Mean", "Sum", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
})

#: Broadcasting comparisons and logic: boolean output (whatever the inputs' element type).
_COMPARE = frozenset({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"})

SUPPORTED_OPS = _SAME_AS_INPUT | _BROADCAST | _COMPARE | {"Pow", "Cast", "Not"}

#: The oldest standard opset whose versions of all the ops above type their output as done here
#: (multidirectional broadcasting for Max/Min/Mean/Sum came with opset 8).
_MIN_OPSET = 8


def type_of(tp: onnx.TypeProto) -> FastType | None:
    """A tensor TypeProto as a FastType; None unless it has an element type and a full shape of
    sizes and names."""
    if tp.WhichOneof("value") != "tensor_type":
        return None
    tensor = tp.tensor_type
    if not tensor.elem_type or not tensor.HasField("shape"):
        return None
    dims: list[int | str] = []
    for d in tensor.shape.dim:
        which = d.WhichOneof("value")
        if which == "dim_value":
            dims.append(d.dim_value)
        elif which == "dim_param" and d.dim_param:
            dims.append(d.dim_param)
        else:
            return None
    return tensor.elem_type, tuple(dims)


def to_type_proto(t: FastType) -> onnx.TypeProto:
    """The TypeProto of a FastType."""
    return onnx.helper.make_tensor_type_proto(t[0], list(t[1]))


def _broadcast(shapes: Sequence[tuple[int | str, ...]]) -> tuple[int | str, ...] | None:
    """Multidirectional broadcast as ONNX shape inference does it, or None when it would not give a
    size or a name for every dim (or would fail)."""
    first = shapes[0]
    if all(s == first for s in shapes):  # (the usual case)
        return first
    rank = max(len(s) for s in shapes)
    out: list[int | str] = []
    for k in range(rank):
        size = 1
        names: set[str] = set()
        for s in shapes:
            j = k - rank + len(s)
            if j < 0:
                continue
            d = s[j]
            if isinstance(d, str):
                names.add(d)
            elif d != 1:
                if size not in (1, d):
                    return None  # incompatible sizes: leave the error to ONNX
                size = d
        if size != 1 or not names:
            out.append(size)
        elif len(names) == 1:
            out.append(names.pop())
        else:
            return None
    return tuple(out)


def node_type(op: str, node: onnx.NodeProto, types: Sequence[FastType]) -> FastType | None:
    """The type of the single output of a standard ``op`` node with inputs of ``types``, or None."""
    if op in _SAME_AS_INPUT:
        return types[0] if len(types) == 1 else None
    if op == "Not":
        return (_BOOL, types[0][1]) if len(types) == 1 else None
    if op == "Cast":
        if len(types) != 1:
            return None
        to = next((a.i for a in node.attribute if a.name == "to"), 0)
        return (to, types[0][1]) if to else None
    if not types:
        return None
    elem = types[0][0]
    if op == "Pow":
        if len(types) != 2:
            return None
    elif any(t[0] != elem for t in types):
        return None  # mixed element types: an invalid node, left to ONNX
    if op in _COMPARE:
        elem = _BOOL
    elif op not in _BROADCAST and op != "Pow":
        return None
    shape = _broadcast([t[1] for t in types])
    return None if shape is None else (elem, shape)


def _defined(op: str, opset: int) -> bool:
    """Whether the standard opset ``opset`` has ``op`` (ONNX inference cannot type an op it lacks)."""
    try:
        onnx.defs.get_schema(op, opset, "")
    except onnx.defs.SchemaError:
        return False
    return True


class Typer:
    """Types node outputs with the rules above, remembering each (op, input types) it has seen:
    big graphs repeat a few patterns (an Add of [1,64] and [64]) thousands of times."""

    def __init__(self, opset: int) -> None:
        self.opset = opset
        self._memo: dict[tuple[str, tuple[FastType, ...]], FastType | None] = {}
        self._defined: dict[str, bool] = {}

    def supports(self, op: str, domain: str) -> bool:
        """Whether ``op`` of ``domain`` is one this module types, as the model's opset defines it."""
        if op not in SUPPORTED_OPS or domain not in ("", "ai.onnx") or self.opset < _MIN_OPSET:
            return False
        found = self._defined.get(op)
        if found is None:
            found = self._defined[op] = _defined(op, self.opset)
        return found

    def run(self, steps: Iterable[tuple[onnx.NodeProto, str, Sequence[str], str]], types: dict[str, FastType]) -> bool:
        """Type each step's output into ``types``, in order; False at the first that cannot be.

        Steps are (node, op, inputs, output) of supported nodes; ``types`` must already hold the
        type of every input that no earlier step produces.
        """
        output, get, supports = self.output, types.__getitem__, self.supports
        for node, op, reads, out in steps:
            if not supports(op, node.domain):
                return False
            t = output(node, op, tuple(map(get, reads)))
            if t is None:
                return False
            types[out] = t
        return True

    def output(self, node: onnx.NodeProto, op: str, types: tuple[FastType, ...]) -> FastType | None:
        """The output type of a supported node with inputs of ``types`` (None: not typed exactly)."""
        if op == "Cast":
            return node_type(op, node, types)
        key = (op, types)
        try:
            return self._memo[key]
        except KeyError:
            found = self._memo[key] = node_type(op, node, types)
            return found
