"""infer-shapes against onnx.shape_inference.infer_shapes_path on the same files.

    nice -n 19 python bench/bench_infer_shapes.py [--repeat 3] [--models big_external many_nodes dyn_transformer]

Models (in ``$GRAPHKIT_BENCH_DIR``, default /tmp/graphkit-bench; ``bench/generate.py`` writes the
first two): ``big_external`` (2.7 GB of external weights), ``many_nodes`` (~50k nodes) and
``dyn_transformer``, the generated 403 MB transformer made dynamic (input ``x`` [batch, seq, 1024],
its head-split and merge Reshapes copying the leading dims with 0), written here on first use.

Each tool runs in its own process (``_measure``); for each model and repetition:

- ``onnx``: ``onnx.shape_inference.infer_shapes_path(in, out)`` (the floor: it parses the file,
  infers and writes; external weights stay where they are);
- ``graphkit``: ``graphkit.load`` + ``infer_shapes_with_report`` (no write: what the inference costs);
- ``graphkit cli``: ``python -m graphkit infer-shapes in out`` (validates, and writes the weights
  beside the output: for the 2.7 GB model that is a copy of 2.7 GB).

Reported: work time after imports (``work s``) and peak RSS per tool, and the ratios to onnx's.
It also checks that graphkit typed every node output and left no dim blank.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _measure

ROOT = Path(__file__).resolve().parent.parent
FOLDER = Path(os.environ.get("GRAPHKIT_BENCH_DIR", "/tmp/graphkit-bench"))
MODELS = {
    "big_external": FOLDER / "big_external" / "model.onnx",
    "many_nodes": FOLDER / "many_nodes.onnx",
    "dyn_transformer": FOLDER / "dyn_transformer" / "model.onnx",
}


def onnx_infer(path: str, out: str) -> dict[str, object]:
    import time

    import onnx

    start = time.perf_counter()
    onnx.shape_inference.infer_shapes_path(path, out, data_prop=True)
    work = time.perf_counter() - start
    model = onnx.load(out, load_external_data=False)
    return {"work_s": work, "value_info": len(model.graph.value_info)}


def graphkit_infer(path: str) -> dict[str, object]:
    import time

    import graphkit as gk
    from graphkit import _infer, _io  # noqa: F401 (imported before the clock starts, as onnx_infer's onnx is)

    start = time.perf_counter()
    report = gk.infer_shapes_with_report(gk.load(path), check=False)
    work = time.perf_counter() - start
    blank = sum(1 for v in report.model.lazy_proto.graph.value_info for d in v.type.tensor_type.shape.dim
                if not d.HasField("dim_value") and not d.dim_param)
    named = sorted({d.dim_param for v in report.model.lazy_proto.graph.value_info
                    for d in v.type.tensor_type.shape.dim if d.dim_param})
    return {"work_s": work, "typed": report.typed, "untyped": len(report.untyped), "blank_dims": blank,
            "dim_names": named[:8]}


def graphkit_cli(path: str, out: str) -> dict[str, object]:
    import time

    from graphkit import _infer, _io  # noqa: F401 (imported before the clock starts)
    from graphkit.cli import (
        infer_shapes,  # noqa: F401
        main,
    )

    start = time.perf_counter()
    code = main(["infer-shapes", path, out, "--overwrite", "--json"])
    return {"work_s": time.perf_counter() - start, "code": code}


def make_dynamic_transformer(target: Path) -> None:
    """The generated transformer with batch and sequence dynamic (weights external, beside it)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    source = FOLDER / "transformer.onnx"
    if not source.exists():
        raise SystemExit(f"{source} is missing: run python bench/generate.py --models a")
    model = onnx.load(source)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[0].dim_param, dims[1].dim_param = "batch", "seq"
    for value in model.graph.output:
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
        value.type.tensor_type.shape.dim[1].dim_param = "seq"
    for tensor in model.graph.initializer:
        if tensor.name in ("/const/heads_shape", "/const/hidden_shape"):
            value = numpy_helper.to_array(tensor).copy()
            value[:2] = 0  # copy batch and sequence from the input
            tensor.CopyFrom(numpy_helper.from_array(value.astype(np.int64), tensor.name))
    del model.graph.value_info[:]
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, target, save_as_external_data=True, location="model.data")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args()
    env = _measure.child_env(ROOT)
    me = Path(__file__).resolve()
    for key in args.models:
        path = MODELS[key]
        if key == "dyn_transformer" and not path.exists():
            make_dynamic_transformer(path)
        if not path.exists():
            print(f"{key}: {path} missing (python bench/generate.py)")
            continue
        with tempfile.TemporaryDirectory(dir=FOLDER) as tmp:
            jobs = {
                "onnx": _measure.Job("onnx", _measure.python_call(me, "onnx_infer", path=str(path),
                                                                  out=str(Path(tmp) / "onnx.onnx")), env),
                "graphkit": _measure.Job("graphkit", _measure.python_call(me, "graphkit_infer", path=str(path)), env),
                "graphkit cli": _measure.Job("graphkit cli", _measure.python_call(
                    me, "graphkit_cli", path=str(path), out=str(Path(tmp) / "gk.onnx")), env),
            }
            runs: dict[str, list[_measure.RunResult]] = {name: [] for name in jobs}
            for _ in range(args.repeat):
                for name, job in jobs.items():
                    _measure.warm_cache([path])
                    result = _measure.run(job, timeout=1800)
                    if not result.ok:
                        print(f"{key} {name}: failed: {result.error}")
                    runs[name].append(result)
        floor = statistics.median(r.work_s or r.wall_s for r in runs["onnx"])
        floor_mb = statistics.median(r.peak_mb for r in runs["onnx"])
        print(f"\n{key} ({path})")
        for name, results in runs.items():
            work = statistics.median(r.work_s or r.wall_s for r in results)
            peak = statistics.median(r.peak_mb for r in results)
            extra = {k: v for k, v in results[-1].result.items() if k not in ("work_s",)}
            print(f"  {name:13s} work {work:7.2f} s ({work / floor:5.2f}x)  peak {peak:7.0f} MiB "
                  f"({peak / floor_mb:5.2f}x)  {extra}")
    _measure.shutdown()


if __name__ == "__main__":
    main()
