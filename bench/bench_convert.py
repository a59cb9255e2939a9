"""Benchmark float16 conversion and mixed precision: graphkit against onnxconverter-common.

For each model, each job runs in its own process (``_measure``): graphkit's ``to_float16`` and
onnxconverter-common's ``convert_float_to_float16`` (both with float32 inputs and outputs kept), and,
with ``--mixed``, graphkit's ``auto_mixed_precision`` and onnxconverter-common's
``auto_convert_mixed_precision`` (same tolerance). Reported per job: wall time, peak RSS, the model
runs the search needed, nodes left in float32 (graphkit: nodes the search or the conversion kept;
onnxconverter-common: non-Cast nodes with a float32 output), and the largest output error of the
written model against the float32 model on the same seeded inputs (measured afterwards, in this
process). ``--big`` also converts the 2.7 GB external-weights model with graphkit (peak memory), and
with ``--mixed`` runs graphkit's search on it (every run fragment by fragment).

    nice -n 19 python bench/bench_convert.py                       # transformer + light models
    nice -n 19 python bench/bench_convert.py --mixed --models light_squeezenet
    nice -n 19 python bench/bench_convert.py --big --models none
    nice -n 19 python bench/bench_convert.py --mixed --only graphkit --big --models chain chain_long
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _measure
import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
RUNNERS = HERE / "_convert_runners.py"
LIGHT = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"
BENCH_DIR = Path(os.environ.get("GRAPHKIT_BENCH_DIR", "/tmp/graphkit-bench"))


def _overflow(folder: Path) -> Path:
    """y = x·1e3·1e3/1e6 on a [64, 64] input: the product overflows float16 though y is x."""
    from onnx import TensorProto, helper, numpy_helper

    consts = [numpy_helper.from_array(np.array([v], np.float32), n) for n, v in (("k", 1e3), ("m", 1e6))]
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "k"], ["a"], name="mul1"), helper.make_node("Mul", ["a", "k"], ["b"], name="mul2"),
         helper.make_node("Div", ["b", "m"], ["c"], name="div"), helper.make_node("Relu", ["c"], ["y"], name="relu")],
        "overflow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])], consts)
    path = folder / "overflow.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _chain(folder: Path, blocks: int = 80, lossy: tuple[int, ...] = (10, 40, 70), name: str = "chain") -> Path:
    """``blocks`` Mul(2)-Mul(0.5)-Relu blocks float16 computes exactly and, after the blocks in ``lossy``,
    ``t + 1000.3 - 1000`` (float16 holds 1000.3 as 1000.5): those Adds must stay float32 (the default:
    247 nodes, three Adds; ``chain_long``: 1,221 nodes, ten).
    Every node has its own weights, as exporters write them (onnxconverter-common's search fails on
    weights shared by a float16 and a float32 node)."""
    from onnx import TensorProto, helper

    weights, nodes, t = [], [], "x"

    def node(op: str, a: str, value: float, out: str) -> None:
        weights.append(helper.make_tensor(f"{out}/w", TensorProto.FLOAT, [1], [value]))
        nodes.append(helper.make_node(op, [a, f"{out}/w"], [out], name=out))

    for i in range(blocks):
        node("Mul", t, 2.0, f"mul{i}")
        node("Mul", f"mul{i}", 0.5, f"half{i}")
        nodes.append(helper.make_node("Relu", [f"half{i}"], [f"relu{i}"], name=f"relu{i}"))
        t = f"relu{i}"
        if i in lossy:
            node("Add", t, 1000.3, f"lossy{i}")
            node("Sub", f"lossy{i}", 1000.0, f"back{i}")
            t = f"back{i}"
    nodes.append(helper.make_node("Identity", [t], ["y"], name="out"))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 16])], weights)
    path = folder / f"{name}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _models(names: list[str], folder: Path) -> list[Path]:
    found = {"transformer": BENCH_DIR / "transformer.onnx",
             "transformer_small": BENCH_DIR / "small" / "transformer.onnx", "overflow": _overflow(folder),
             "chain": _chain(folder),
             "chain_long": _chain(folder, 400, tuple(range(20, 400, 40)), "chain_long")}
    found.update({p.stem: p for p in sorted(LIGHT.glob("light_*.onnx"))})
    if names == ["none"]:
        return []
    chosen = names or list(found)
    missing = [n for n in chosen if n not in found or not found[n].exists()]
    if missing:
        raise SystemExit(f"unknown or missing model(s): {missing} (transformer: python bench/generate.py --models a)")
    return [found[n] for n in chosen]


def _error(source: Path, converted: Path) -> float:
    """Largest |converted - float32| over the outputs, on seeded inputs."""
    import graphkit as gk

    model = gk.load(source)
    feeds = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=0))
    want = gk.run(model, feeds)
    got = gk.run(gk.load(converted), feeds)
    return max(float(np.max(np.abs(got[k].astype(np.float64) - v))) for k, v in want.items())


def _job(name: str, function: str, model: Path, out: Path, **kwargs: object) -> _measure.Job:
    env = _measure.child_env(REPO_ROOT)
    return _measure.Job(name, _measure.python_call(RUNNERS, function, model=str(model), out=str(out), **kwargs),
                        env, str(REPO_ROOT), str(out))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=[],
                        help="transformer, transformer_small (generate.py --small), overflow, chain, chain_long, light_<name>, "
                             "or none")
    parser.add_argument("--mixed", action="store_true", help="also the mixed-precision searches")
    parser.add_argument("--big", action="store_true", help="also graphkit on the 2.7 GB external-weights model")
    parser.add_argument("--only", choices=["graphkit", "occ"], help="run only this tool's jobs")
    parser.add_argument("--fragment-mb", type=float, default=64.0, help="graphkit's search: MiB per session")
    parser.add_argument("--atol", type=float, default=1e-3)
    parser.add_argument("--rtol", type=float, default=1e-2)
    parser.add_argument("--timeout", type=float, default=900.0, help="per job, seconds")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-convert-") as folder:
        tmp = Path(folder)
        for model in _models(args.models, tmp):
            jobs = [_job("graphkit fp16", "graphkit_fp16", model, tmp / "gk16.onnx"),
                    _job("occ fp16", "occ_fp16", model, tmp / "occ16.onnx")]
            if args.mixed:
                tol = {"atol": args.atol, "rtol": args.rtol}
                jobs += [_job("graphkit auto-mixed", "graphkit_mixed", model, tmp / "gkmix.onnx", **tol,
                              fragment_mb=args.fragment_mb),
                         _job("occ auto-mixed", "occ_mixed", model, tmp / "occmix.onnx", **tol)]
            for job in jobs:
                if args.only and not job.name.startswith(args.only):
                    continue
                _measure.warm_cache([model])
                result = _measure.run(job, timeout=args.timeout)
                row: dict[str, Any] = {"model": model.stem, "job": job.name, "ok": result.ok,
                                       "wall_s": result.wall_s, "peak_mb": result.peak_mb, **result.result}
                if result.ok and job.output:
                    try:
                        row["max_abs_error"] = _error(model, Path(job.output))
                    except Exception as err:  # (a tool's output that ONNX Runtime refuses is a result)
                        row["ok"] = False
                        row["error"] = "its model fails in ONNX Runtime: " + str(err).splitlines()[0][-120:]
                else:
                    row["error"] = result.error
                rows.append(row)
                _print(row)
        if args.big:
            model = BENCH_DIR / "big_external" / "model.onnx"
            weights = (model.parent / "model.data").stat().st_size / 2**20
            largest = max(int(e.value) for t in onnx.load(model, load_external_data=False).graph.initializer
                          for e in t.external_data if e.key == "length") / 2**20
            big = [("graphkit fp16", "graphkit_fp16", {})]
            if args.mixed:
                big.append(("graphkit auto-mixed", "graphkit_mixed", {"atol": args.atol, "rtol": args.rtol}))
            for name, function, kwargs in big:
                out = tmp / function / "model.onnx"
                out.parent.mkdir()
                result = _measure.run(_job(name, function, model, out, **kwargs), timeout=args.timeout)
                row = {"model": "big_external", "job": name, "ok": result.ok, "wall_s": result.wall_s,
                       "peak_mb": result.peak_mb, "weights_mb": weights, "largest_weight_mb": largest, **result.result}
                if not result.ok:
                    row["error"] = result.error
                rows.append(row)
                _print(row)
    _measure.shutdown()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=str))
    return 0


def _print(row: dict[str, Any]) -> None:
    extra = {k: v for k, v in row.items() if k not in ("model", "job", "ok", "wall_s", "peak_mb", "work_s")}
    print(f"{row['model']:<22} {row['job']:<20} {'ok' if row['ok'] else 'FAIL':<4} {row['wall_s']:>8.1f} s "
          f"{row['peak_mb']:>8.0f} MB  " + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                                    for k, v in extra.items()), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
