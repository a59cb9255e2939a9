"""What each benchmarked tool runs, one function per tool, executed in a fresh interpreter.

`_measure.python_call` loads this file by path in a child process and calls one function with
JSON keyword arguments. Every function imports its tool itself (so a run pays only for its own
imports), does load -> extract -> save as that tool's documented usage does it, and returns
``{"work_s": seconds after imports}``. ``output`` is the ``.onnx`` path to write in an empty
folder; when ``external`` is true, weights go to ``model.data`` next to it (where the tool
lets us choose).

Polygraphy is measured through its CLI instead (see ``bench_extract.py``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

DATA_FILE = "model.data"


def floor(model: str, output: str, external: bool) -> dict[str, float]:
    """The floor: ``onnx.load`` then ``onnx.save`` of the whole model, no surgery."""
    import onnx

    start = time.perf_counter()
    proto = onnx.load(model)
    _onnx_save(proto, output, external)
    return {"work_s": time.perf_counter() - start}


def graphkit_probe() -> dict[str, float]:
    """Import graphkit and check it has the API the benchmark calls; raise if not."""
    import graphkit

    missing = [name for name in ("load", "extract", "save") if not hasattr(graphkit, name)]
    if missing:
        raise ImportError(f"graphkit has no {', '.join(missing)}")
    return {}


def graphkit_extract(
    model: str, output: str, inputs: Sequence[str], outputs: Sequence[str], external: bool
) -> dict[str, float]:
    """graphkit: ``load`` -> ``extract`` -> ``save`` (graphkit decides where weights go)."""
    import graphkit

    del external  # graphkit keeps external weights external on its own
    start = time.perf_counter()
    loaded = graphkit.load(model)
    sliced = graphkit.extract(loaded, inputs=list(inputs), outputs=list(outputs))
    graphkit.save(sliced, output)
    return {"work_s": time.perf_counter() - start}


def onnx_utils_extract(
    model: str, output: str, inputs: Sequence[str], outputs: Sequence[str], external: bool
) -> dict[str, float]:
    """``onnx.utils.extract_model`` with its defaults (checker and shape inference on).

    It decides for itself where weights go: external only when the result exceeds 2 GB.
    """
    import onnx.utils

    del external
    start = time.perf_counter()
    onnx.utils.extract_model(model, output, list(inputs), list(outputs))
    return {"work_s": time.perf_counter() - start}


def graphsurgeon_extract(
    model: str, output: str, inputs: Sequence[str], outputs: Sequence[str], external: bool
) -> dict[str, float]:
    """onnx-graphsurgeon's isolating-a-subgraph recipe: import, set I/O, cleanup, export, save.

    The benchmark models carry no ``value_info`` for intermediate tensors, and graphsurgeon
    exports a boundary tensor without a shape as a graph input or output without one, which
    onnx.checker rejects. So, as a user must, this first runs ONNX shape inference (on the graph
    alone, weights loaded afterwards, as ``onnx.utils.extract_model`` does). Boundary tensors
    still without a dtype are declared float32, as graphsurgeon's example does.
    """
    import os

    import numpy as np
    import onnx
    import onnx_graphsurgeon as gs

    start = time.perf_counter()
    proto = onnx.shape_inference.infer_shapes(onnx.load(model, load_external_data=False))
    onnx.load_external_data_for_model(proto, os.path.dirname(os.path.abspath(model)))
    graph = gs.import_onnx(proto)
    tensors = graph.tensors()
    graph.inputs = [_as_float_variable(tensors[name], np) for name in inputs]
    graph.outputs = [_as_float_variable(tensors[name], np) for name in outputs]
    graph.cleanup()
    _onnx_save(gs.export_onnx(graph), output, external)
    return {"work_s": time.perf_counter() - start}


def _as_float_variable(tensor: object, np: object) -> object:
    dtype = getattr(tensor, "dtype", None) or np.float32  # type: ignore[attr-defined]
    return tensor.to_variable(dtype=dtype, shape=getattr(tensor, "shape", None))  # type: ignore[attr-defined]


def _onnx_save(proto: onnx.ModelProto, output: str, external: bool) -> None:
    import onnx

    if external:
        onnx.save(proto, output, save_as_external_data=True, all_tensors_to_one_file=True, location=DATA_FILE)
    else:
        onnx.save(proto, output)
