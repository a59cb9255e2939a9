"""inspect --stats against plain inspect (the floor) and onnx-tool, on the onnx wheel's ResNet-50 and
the benchmark transformer: wall time ratios and the totals each tool reports.

    python bench/bench_inspect.py [--repeat 3] [--small]

onnx-tool (the ``bench`` extra) is measured when installed: load, shape inference at the model's
input shape and profile, in its own process. Its MAC conventions for elementwise ops differ from
graphkit's (BatchNormalization, Softmax and LayerNormalization count several operations per
element; Gemm counts its bias), so the table gives the Conv/MatMul/Gemm part beside the totals.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _measure
import generate

ROOT = Path(__file__).resolve().parent.parent
LIGHT = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"
HEAVY = ("Conv", "MatMul", "Gemm")


def graphkit_stats(path: str) -> dict[str, object]:
    """Run in the child: list_nodes' totals."""
    import time

    import graphkit as gk

    start = time.perf_counter()
    listing = gk.list_nodes(gk.load(path))
    heavy = sum(s.macs for s in listing.by_op if s.op_type in HEAVY)
    return {"work_s": time.perf_counter() - start, "macs": listing.macs, "params": listing.params, "heavy": heavy}


def onnx_tool_stats(path: str, shapes: dict[str, list[int]]) -> dict[str, object]:
    """Run in the child: onnx-tool's profile at the given input shapes."""
    import time

    import numpy as np
    from onnx_tool import Model

    start = time.perf_counter()
    model = Model(path)
    model.graph.shape_infer({name: np.zeros(shape, np.float32) for name, shape in shapes.items()})
    model.graph.profile()
    heavy = sum(n.macs[0] for n in model.graph.nodemap.values() if n.op_type in HEAVY)
    return {"work_s": time.perf_counter() - start, "macs": int(model.graph.macs[0]),
            "params": int(model.graph.params), "heavy": int(heavy)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="the tiny transformer (a few seconds)")
    args = parser.parse_args()
    transformer = generate.model_path("transformer", small=args.small)
    if not transformer.exists():
        generate.main(["--models", "transformer", *(["--small"] if args.small else [])])
    models = {"light_resnet50": (LIGHT / "light_resnet50.onnx", {"gpu_0/data_0": [1, 3, 224, 224]}),
              "transformer": (transformer, {"x": [1, 8 if args.small else 128, 32 if args.small else 1024]})}
    env = _measure.child_env(ROOT)
    here = Path(__file__).resolve()
    try:
        import onnx_tool  # noqa: F401
        have_onnx_tool = True
    except ImportError:
        have_onnx_tool = False
    rows = []
    for label, (path, shapes) in models.items():
        jobs = [lambda p=path: _measure.Job("inspect --stats", (sys.executable, "-m", "graphkit", "inspect",
                                                                   "--stats", "--json", str(p)), env=env),
                lambda p=path: _measure.Job("graphkit.list_nodes", _measure.python_call(
                    here, "graphkit_stats", path=str(p)), env=env)]
        if have_onnx_tool:
            jobs.append(lambda p=path, s=shapes: _measure.Job("onnx-tool", _measure.python_call(
                here, "onnx_tool_stats", path=str(p), shapes=s), env=env))
        floor = lambda p=path: _measure.Job("inspect", (sys.executable, "-m", "graphkit", "inspect", str(p)), env=env)  # noqa: E731
        trials = _measure.measure_against_floor(floor, jobs, repeat=args.repeat, warm=[path])
        for job in ("inspect", "inspect --stats", "graphkit.list_nodes", *(("onnx-tool",) if have_onnx_tool else ())):
            mine = [t for t in trials if t.job == job]
            summary = _measure.summarize(job, mine)
            ratios = [t.run.wall_s / t.floor.wall_s for t in mine if t.run.ok and t.floor.ok]
            result = next((t.run.result for t in mine if t.run.result), {})
            rows.append({"model": label, "tool": job, "wall_s": summary.wall_s,
                         "ratio": _measure.median(ratios), **{k: result.get(k) for k in ("macs", "params", "heavy")}})
    _measure.shutdown()
    print(json.dumps(rows, indent=1))
    print("\n| model | tool | wall s | × inspect | MACs | Conv/MatMul/Gemm MACs | params |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['tool']} | {r['wall_s']:.2f} | {r['ratio']:.2f} | "
              f"{r['macs'] or ''} | {r['heavy'] or ''} | {r['params'] or ''} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
