"""Python implementations of custom operators: the ``custom_op`` decorator and loading them from a file.

A model with a custom-domain node (``custom::deform_conv2d``) runs in ONNX Runtime only when something
implements the operator. A compiled library is registered by path (``--custom-ops LIB.so``); a
Python one is a numpy function decorated here::

    import graphkit

    @graphkit.custom_op("custom", "deform_conv2d", outputs=["float32"])
    def deform_conv2d(x, weight, offset, *, stride, padding, dilation, groups, offset_groups):
        ...

The function takes the node's inputs in order and its attributes as keywords (ints, floats, strings
and lists of them, as the node holds them) and returns one array per declared output. The same
function runs in ONNX Runtime (``graphkit._ort`` hands it to onnxruntime-extensions) and in onnx's
ReferenceEvaluator (``reference_op``), so both backends compute the operator identically.

Nothing here imports onnxruntime: a file of operators can be loaded by any verb.
"""

from __future__ import annotations

import os
import runpy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from graphkit import _check_args as argcheck
from graphkit._files import check_regular, exists
from graphkit.errors import ArgumentTypeError, RuntimeFailure, UsageError

__all__ = ["CustomOp", "attribute_values", "custom_op", "load_python_ops", "reference_op", "uses"]

#: The extra that installs onnxruntime-extensions, which runs Python operators inside ONNX Runtime.
EXTRA = "custom-ops"
#: The dtypes an operator's outputs may have (what onnxruntime-extensions can hand back).
OUTPUT_DTYPES = ("float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                 "uint64", "bool")
INSTALL_HINT = f"install it with: pip install 'graphkit[{EXTRA}]' (or pip install onnxruntime-extensions)"


@dataclass(frozen=True)
class CustomOp:
    """A Python implementation of the operator ``domain::op_type``.

    Attributes:
        domain: The operator's domain ("" is the ONNX domain).
        op_type: The operator's name.
        function: The numpy function: inputs positionally, the node's attributes as keywords.
        outputs: The numpy dtype name of each output, in order.
    """

    domain: str
    op_type: str
    function: Callable[..., Any]
    outputs: tuple[str, ...]

    @property
    def key(self) -> tuple[str, str]:
        """(domain, op_type), the domain "ai.onnx" written as ""."""
        return ("" if self.domain == "ai.onnx" else self.domain, self.op_type)

    @property
    def label(self) -> str:
        return f"{self.domain or 'ai.onnx'}::{self.op_type}"

    def __call__(self, *inputs: Any, **attributes: Any) -> Any:
        return self.function(*inputs, **attributes)

    def compute(self, inputs: Sequence[Any], attributes: Mapping[str, Any], where: str) -> tuple[np.ndarray, ...]:
        """Call the function and check what it returns: one array per declared output, of its dtype.

        Raises:
            RuntimeFailure: The function raised, or returned the wrong number of outputs or a value
                that is not an array of the declared dtype.
        """
        name = getattr(self.function, "__name__", "the function")
        try:
            result = self.function(*inputs, **dict(attributes))
        except Exception as err:  # the user's function raises whatever it raises
            raise RuntimeFailure(
                f"the Python implementation of {self.label} ({name}) failed on {where}: "
                f"{type(err).__name__}: {err}",
                hint="fix the function (python_ops=); it takes the inputs in order and the "
                     "node's attributes as keywords",
                cli_hint="fix the function in the --python-ops file; it takes the inputs in order and the "
                         "node's attributes as keywords",
            ) from err
        values = result if isinstance(result, tuple) else (result,)
        if len(values) != len(self.outputs):
            raise RuntimeFailure(
                f"the Python implementation of {self.label} ({name}) returned {len(values)} value(s) on "
                f"{where}; it declares {len(self.outputs)} output(s)",
                hint="return a tuple with one array per entry of outputs=[...]",
            )
        arrays = []
        for k, (value, dtype) in enumerate(zip(values, self.outputs)):
            try:
                arrays.append(np.asarray(value, dtype=dtype))
            except (TypeError, ValueError) as err:
                raise RuntimeFailure(
                    f"the Python implementation of {self.label} ({name}) returned a value for output {k} "
                    f"that is not an array of {dtype} on {where}: {err}",
                    hint="return numpy arrays of the dtypes given in outputs=[...]",
                ) from err
        return tuple(arrays)


def custom_op(domain: str, op_type: str, *, outputs: Sequence[str]) -> Callable[[Callable[..., Any]], CustomOp]:
    """Declare a numpy function as the implementation of the operator ``domain::op_type``.

    Args:
        domain: The operator's domain, as the model's nodes name it ("custom", "my", "mmcv").
        op_type: The operator's name ("deform_conv2d").
        outputs: The numpy dtype name of each output ("float32", "int64", ...).

    Returns:
        A decorator turning the function into a ``CustomOp`` (still callable like the function).

    Raises:
        ArgumentTypeError: A name that is not text, or outputs that are not dtype names.
        UsageError: An empty operator name, no outputs, or an unknown dtype.
    """
    if not isinstance(domain, str):
        raise ArgumentTypeError(f"domain= must be text, not {type(domain).__name__}", hint='e.g. "custom"')
    if not isinstance(op_type, str) or not op_type:
        raise ArgumentTypeError(f"op_type= must be a non-empty name, not {op_type!r}", hint='e.g. "deform_conv2d"')
    if isinstance(outputs, (str, bytes)) or not isinstance(outputs, Sequence) or not outputs:
        raise ArgumentTypeError(f"outputs= must be a list of dtype names, not {outputs!r}",
                                hint='e.g. outputs=["float32"]')
    dtypes = []
    for dtype in outputs:
        if not isinstance(dtype, str) or dtype not in OUTPUT_DTYPES:
            raise UsageError(f"outputs= of {domain}::{op_type}: {dtype!r} is not a numpy dtype name",
                             hint="use one of " + ", ".join(OUTPUT_DTYPES))
        dtypes.append(dtype)

    def decorate(function: Callable[..., Any]) -> CustomOp:
        if not callable(function):
            raise ArgumentTypeError(f"custom_op decorates a function, not {type(function).__name__}",
                                    hint="put @graphkit.custom_op(...) above a def")
        return CustomOp(domain, op_type, function, tuple(dtypes))

    return decorate


def load_python_ops(path: str | os.PathLike[str]) -> tuple[CustomOp, ...]:
    """Run a Python file and collect the operators it declares with ``@graphkit.custom_op``.

    Raises:
        UsageError: The file is missing, not a regular file, fails when run, or declares no operator.
    """
    file = Path(argcheck.path(path, "path"))
    if not exists(file):
        raise UsageError(f"no such Python operators file: {file}", hint="check the path given in python_ops=",
                         cli_hint="check the path given to --python-ops")
    check_regular(file, what="Python operators file", max_bytes=None, error=UsageError)
    try:
        namespace = runpy.run_path(str(file), run_name=f"graphkit_python_ops_{file.stem}")
    except Exception as err:  # the user's file raises whatever it raises
        raise UsageError(f"running {file} failed: {type(err).__name__}: {err}",
                         hint="the file must run on its own: python " + str(file)) from err
    found: dict[tuple[str, str], CustomOp] = {}
    for value in namespace.values():
        if isinstance(value, CustomOp):
            found[value.key] = value
    if not found:
        raise UsageError(f"{file} declares no custom operator",
                         hint='decorate a numpy function with @graphkit.custom_op("domain", "op", outputs=["float32"])')
    return tuple(found.values())


def check_python_ops(python_ops: Any, keyword: str = "python_ops") -> tuple[CustomOp, ...]:
    """``python_ops=`` as a tuple of CustomOp: CustomOp objects and paths of ``--python-ops`` files.

    Raises:
        ArgumentTypeError: An item that is neither.
        UsageError: A file that cannot be loaded.
    """
    if python_ops is None:
        return ()
    if isinstance(python_ops, (str, bytes, os.PathLike, CustomOp)) or not isinstance(python_ops, Sequence):
        raise ArgumentTypeError(f"{keyword}= must be a list of graphkit.custom_op functions or .py paths, "
                                f"not {type(python_ops).__name__}", hint=f"e.g. {keyword}=['ops.py']")
    ops: dict[tuple[str, str], CustomOp] = {}
    for k, item in enumerate(python_ops):
        if isinstance(item, CustomOp):
            ops[item.key] = item
        elif isinstance(item, (str, os.PathLike)) and not isinstance(item, bytes):
            ops.update((op.key, op) for op in load_python_ops(argcheck.path(item, f"{keyword}[{k}]")))
        else:
            raise ArgumentTypeError(f"{keyword}[{k}] must be a graphkit.custom_op function or a .py path, "
                                    f"not {type(item).__name__}", hint=f"e.g. {keyword}=['ops.py']")
    return tuple(ops.values())


def attribute_values(node: onnx.NodeProto) -> dict[str, Any]:
    """A node's attributes as Python values: ints, floats, str and lists of them; tensors as arrays."""
    values: dict[str, Any] = {}
    for attr in node.attribute:
        value = onnx.helper.get_attribute_value(attr)
        values[attr.name] = _plain(value)
    return values


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def uses(graph_nodes: Sequence[onnx.NodeProto], ops: Sequence[CustomOp]) -> bool:
    """Whether any of the nodes (not looking into bodies) is one of ``ops``."""
    keys = {op.key for op in ops}
    return any(("" if n.domain == "ai.onnx" else n.domain, n.op_type) in keys for n in graph_nodes)


def reference_op(op: CustomOp) -> type:
    """``op`` as an operator class for onnx's ReferenceEvaluator (``new_ops=[...]``)."""
    from onnx.reference.op_run import OpRun

    def _run(self: Any, *inputs: Any, **_: Any) -> tuple[np.ndarray, ...]:
        node = self.onnx_node
        where = f"node {node.name or node.op_type!r}"
        return op.compute(inputs, attribute_values(node), where)

    return type(op.op_type, (OpRun,), {"op_domain": op.key[0], "_run": _run})
