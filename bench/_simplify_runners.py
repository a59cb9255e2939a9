"""What each simplifier runs in its child process: load -> simplify -> save, one function per tool.

`_measure.python_call` loads this file by path in a fresh interpreter and calls one function with
JSON keyword arguments. Each function imports its tool itself and returns ``{"work_s": seconds after
imports}``. Polygraphy runs through its CLI (``polygraphy surgeon sanitize --fold-constants``), as
its users run it, so it has no function here.
"""

from __future__ import annotations

import os
import time

DATA_FILE = "model.data"


def _save(proto: object, output: str, external: bool) -> None:
    import onnx

    if external:
        onnx.save(proto, output, save_as_external_data=True, all_tensors_to_one_file=True, location=DATA_FILE)
    else:
        onnx.save(proto, output)


def floor(model: str, output: str, external: bool) -> dict[str, float]:
    """The floor: ``onnx.load`` then ``onnx.save`` of the whole model, nothing else."""
    import onnx

    start = time.perf_counter()
    _save(onnx.load(model), output, external)
    return {"work_s": time.perf_counter() - start}


def graph_only(model: str, output: str, external: bool) -> dict[str, float]:
    """``onnx.load(load_external_data=False)`` + save of the graph: the memory of the graph alone."""
    import onnx

    del external
    start = time.perf_counter()
    proto = onnx.load(model, load_external_data=False)
    onnx.save(proto, output)
    return {"work_s": time.perf_counter() - start}


def graphkit_simplify(model: str, output: str, external: bool) -> dict[str, float]:
    """graphkit: ``load`` -> ``simplify`` -> ``save`` (external weights stay where they are until saved)."""
    import graphkit

    del external
    start = time.perf_counter()
    result = graphkit.simplify(graphkit.load(model))
    graphkit.save(result, output)
    return {"work_s": time.perf_counter() - start}


def graphkit_simplify_ort(model: str, output: str, external: bool) -> dict[str, float]:
    """graphkit with ``target="onnxruntime"``: ONNX Runtime's contrib operators allowed, as onnxsim's default."""
    import graphkit

    del external
    start = time.perf_counter()
    result = graphkit.simplify(graphkit.load(model), target="onnxruntime")
    graphkit.save(result, output)
    return {"work_s": time.perf_counter() - start}


def onnxsim_simplify(model: str, output: str, external: bool) -> dict[str, float]:
    """onnxsim's documented Python use: ``onnxsim.simplify(onnx.load(path))`` then ``onnx.save``."""
    import onnx
    import onnxsim

    start = time.perf_counter()
    simplified, ok = onnxsim.simplify(onnx.load(model))
    if not ok:
        raise RuntimeError("onnxsim's own check failed")
    _save(simplified, output, external)
    return {"work_s": time.perf_counter() - start}


def onnxslim_simplify(model: str, output: str, external: bool) -> dict[str, float]:
    """onnxslim's documented Python use: ``onnxslim.slim(path)`` then ``onnx.save``."""
    import onnxslim

    start = time.perf_counter()
    slimmed = onnxslim.slim(model)
    _save(slimmed, output, external)
    return {"work_s": time.perf_counter() - start}


def polygraphy_argv(model: str, output: str, external: bool) -> list[str]:
    """``polygraphy surgeon sanitize IN --fold-constants -o OUT`` (external data: into model.data)."""
    argv = ["polygraphy", "surgeon", "sanitize", model, "--fold-constants", "-o", output]
    if external:
        argv += ["--save-external-data", os.path.join(os.path.dirname(output), DATA_FILE)]
    return argv
