"""Benchmark: chain-running N fragments versus one run of the whole model.

    python bench/bench_run_chain.py [--model PATH | --small] [--parts 2 4 8] [--repeat 3] [--json]

The model is, in order of preference: ``--model PATH``; the transformer of the extract benchmark
(``bench/generate.py``'s ``generate("transformer")``, written to ``$GRAPHKIT_BENCH_DIR``); or, when that
generator is not here, a small transformer-like MLP built in memory. For each N the model is split
into N balanced parts (``graphkit.split(model, parts=N)``) and run with ``graphkit.run_chain`` on the
same seeded input as the whole model. Reported: the whole model's session load and run time; for each
N the split time, the chain's load and run time, the ratios against the whole model (run only, and
load + run), and the largest difference from the whole model's outputs. Times are medians of
``--repeat`` runs. ONNX Runtime on CPU, default threads.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import graphkit as gk  # noqa: E402
from graphkit._chain import run_chain  # noqa: E402
from graphkit._run import session  # noqa: E402


def _generator() -> object | None:
    path = HERE / "generate.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("graphkit_bench_generate", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def local_model(layers: int = 8, width: int = 512, seq: int = 64) -> gk.Model:
    """A transformer-like stack (MatMul+Add, Relu, MatMul+Add, residual Add, LayerNormalization) per layer."""
    rng = np.random.default_rng(0)
    b = gk.GraphBuilder("local_stack")
    x = b.input("x", "float32", [1, seq, width])
    for i in range(layers):
        w1 = b.initializer((rng.standard_normal((width, 2 * width)) / np.sqrt(width)).astype(np.float32), f"l{i}.w1")
        b1 = b.initializer(np.zeros(2 * width, np.float32), f"l{i}.b1")
        w2 = b.initializer((rng.standard_normal((2 * width, width)) / np.sqrt(2 * width)).astype(np.float32), f"l{i}.w2")
        b2 = b.initializer(np.zeros(width, np.float32), f"l{i}.b2")
        scale = b.initializer(np.ones(width, np.float32), f"l{i}.ln.scale")
        bias = b.initializer(np.zeros(width, np.float32), f"l{i}.ln.bias")
        h = b.node("MatMul", [x, w1], name=f"/l{i}/fc1/MatMul")
        h = b.node("Add", [h, b1], name=f"/l{i}/fc1/Add")
        h = b.node("Relu", [h], name=f"/l{i}/Relu")
        h = b.node("MatMul", [h, w2], name=f"/l{i}/fc2/MatMul")
        h = b.node("Add", [h, b2], name=f"/l{i}/fc2/Add")
        h = b.node("Add", [x, h], name=f"/l{i}/residual")
        x = b.node("LayerNormalization", [h, scale, bias], name=f"/l{i}/ln", outputs=[f"/l{i}/output"], axis=-1)
    b.node("Identity", [x], name="out", outputs=["y"])
    b.output("y", "float32", [1, seq, width])
    return b.build()


def _model(args: argparse.Namespace) -> tuple[gk.Model, str]:
    if args.model:
        return gk.load(args.model), str(args.model)
    generate = _generator()
    if generate is not None:
        path = generate.generate("transformer", small=args.small)  # type: ignore[attr-defined]
        return gk.load(path), f"{path} (bench/generate.py transformer{' --small' if args.small else ''})"
    model = local_model(layers=8, width=256 if args.small else 512)
    return model, "local transformer-like stack (bench/generate.py not found)"


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def measure(model: gk.Model, parts: list[int], repeat: int, opt_level: str) -> dict[str, object]:
    """Whole-model times, then split + chain times and ratios for each N."""
    feeds = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=0))
    names = [o.name for o in model.graph.output]
    warm = session(model, opt_level=opt_level)  # first session in the process pays one-time setup
    warm.run(names, feeds)
    del warm
    loads, runs = [], []
    expected: dict[str, np.ndarray] = {}
    for _ in range(repeat):
        start = time.perf_counter()
        sess = session(model, opt_level=opt_level)
        loaded = time.perf_counter()
        values = sess.run(names, feeds)
        done = time.perf_counter()
        loads.append(loaded - start)
        runs.append(done - loaded)
        expected = dict(zip(names, values))
        del sess
    whole = {"load_s": _median(loads), "run_s": _median(runs)}
    rows = []
    for n in parts:
        start = time.perf_counter()
        pieces = gk.split(model, parts=n, check=False)
        split_s = time.perf_counter() - start
        chain_loads, chain_runs, diff = [], [], 0.0
        for _ in range(repeat):
            result = run_chain(pieces, feeds, reference=None, opt_level=opt_level)
            chain_runs.append(sum(f.run_seconds for f in result.fragments))
            chain_loads.append(sum(f.load_seconds for f in result.fragments))
            diff = max(float(np.abs(result.outputs[k] - v).max()) for k, v in expected.items())
            peak = result.peak_live_bytes
        load_s, run_s = _median(chain_loads), _median(chain_runs)
        rows.append({
            "parts": n, "cuts": [list(c) for c in pieces.cuts], "split_s": split_s, "load_s": load_s, "run_s": run_s,
            "run_ratio": run_s / whole["run_s"],
            "total_ratio": (load_s + run_s) / (whole["load_s"] + whole["run_s"]),
            "max_abs_diff": diff, "peak_live_bytes": peak,
        })
    return {"whole": whole, "chains": rows, "opt_level": opt_level, "repeat": repeat}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="an .onnx model to use instead of the generated transformer")
    parser.add_argument("--small", action="store_true", help="use the small variant of the generated model")
    parser.add_argument("--parts", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--opt-level", default="all", choices=["disable", "basic", "extended", "all"])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory():
        model, label = _model(args)
        report = measure(model, args.parts, args.repeat, args.opt_level)
    report["model"] = label
    report["nodes"] = len(model.graph.node)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    whole = report["whole"]
    assert isinstance(whole, dict)
    print(f"model: {label}, {report['nodes']} nodes; opt-level {args.opt_level}; median of {args.repeat}")
    print(f"whole model      load {whole['load_s'] * 1e3:8.1f} ms   run {whole['run_s'] * 1e3:8.1f} ms")
    for row in report["chains"]:  # type: ignore[attr-defined]
        print(f"chain of {row['parts']:<2}      load {row['load_s'] * 1e3:8.1f} ms   run {row['run_s'] * 1e3:8.1f} ms   "
              f"run ratio {row['run_ratio']:.3f}   load+run ratio {row['total_ratio']:.3f}   "
              f"split {row['split_s'] * 1e3:.0f} ms   max |diff| {row['max_abs_diff']:.2g}   "
              f"peak held {row['peak_live_bytes'] / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
