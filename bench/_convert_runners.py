"""Functions bench_convert.py runs in fresh interpreters (one conversion each); each returns a dict."""

from __future__ import annotations

import time
from typing import Any

import numpy as np


def _feeds(path: str) -> dict[str, np.ndarray]:
    import graphkit as gk

    return gk.make_feeds(gk.load(path), feed_options=gk.FeedOptions(seed=0))


def graphkit_fp16(model: str, out: str) -> dict[str, Any]:
    import graphkit as gk

    start = time.perf_counter()
    report = gk.to_float16_with_report(gk.load(model), keep_io_types=True)
    gk.save(report.model, out)
    return {"work_s": time.perf_counter() - start, "kept": len(report.kept), "runs": 0}


def occ_fp16(model: str, out: str) -> dict[str, Any]:
    import onnx
    from onnxconverter_common import float16

    start = time.perf_counter()
    proto = onnx.load(model)
    converted = float16.convert_float_to_float16(proto, keep_io_types=True)
    onnx.save(converted, out, save_as_external_data=converted.ByteSize() > 2**31 - 2**26)
    return {"work_s": time.perf_counter() - start, "kept": _float_nodes(converted), "runs": 0}


def graphkit_mixed(model: str, out: str, atol: float, rtol: float, fragment_mb: float = 64.0) -> dict[str, Any]:
    import graphkit as gk

    start = time.perf_counter()
    source = gk.load(model)
    result = gk.auto_mixed_precision(source, tolerance=gk.Tolerance(atol, rtol), keep_io_types=True,
                                     feeds=_feeds(model), fragment_bytes=int(fragment_mb * 2**20))
    gk.save(result.model, out)
    return {"work_s": time.perf_counter() - start, "kept": len(result.kept), "passes": result.passes,
            "trials": result.trials, "runs": result.runs, "trial_runs": result.trial_runs,
            "fragment_runs": result.fragment_runs, "passed": result.passed}


def occ_mixed(model: str, out: str, atol: float, rtol: float) -> dict[str, Any]:
    import onnx
    import onnxruntime as ort
    from onnxconverter_common import auto_mixed_precision

    runs = {"n": 0}
    original = ort.InferenceSession.run

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        runs["n"] += 1
        return original(self, *args, **kwargs)

    ort.InferenceSession.run = counted  # type: ignore[method-assign]
    feeds = _feeds(model)
    start = time.perf_counter()
    proto = onnx.load(model)
    converted = auto_mixed_precision.auto_convert_mixed_precision(proto, feeds, rtol=rtol, atol=atol,
                                                                  keep_io_types=True)
    onnx.save(converted, out)
    return {"work_s": time.perf_counter() - start, "kept": _float_nodes(converted), "runs": runs["n"]}


def _float_nodes(proto: Any) -> int:
    """Nodes (not Casts) that still compute in float32: those with a float32 output, by inference."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception:
        return -1
    types = {v.name: v.type.tensor_type.elem_type for v in (*inferred.graph.value_info, *inferred.graph.output)}
    return sum(1 for n in proto.graph.node if n.op_type != "Cast" and any(types.get(o) == 1 for o in n.output))
