"""simplify against onnxsim, onnxslim and ``polygraphy surgeon sanitize --fold-constants``.

Every tool runs load -> simplify -> save in its own process, alternately with the floor (``onnx.load``
+ ``onnx.save`` of the same model); the table gives the nodes left (every graph, bodies included),
wall time and peak memory as ratios to the floor, and whether the written model computes what the
original does (both run in ONNX Runtime on the same seeded inputs; the largest absolute difference
over the outputs is shown). For the external-data model the graph-only load (``onnx.load(...,
load_external_data=False)`` + save) is measured too: the memory graphkit is held to.

Models: onnx's light models (alexnet ... zfnet512), two transformer encoders built the way
exporters write them (Constant nodes, Identity on tied weights, Dropout, ``Shape -> Gather ->
Unsqueeze -> Concat -> Reshape`` around every attention; one with static input dims, one with
dynamic batch and sequence), and the benchmark models of ``generate.py`` (transformer, many_nodes,
big_external). graphkit runs twice: with its default target (standard ONNX) and as ``graphkit-ort``
with ``target="onnxruntime"`` (ONNX Runtime's contrib operators, which onnxsim writes by default).
Tools that are not installed are reported as such (``pip install .[bench]``).

Run ``nice -n 19 python bench/bench_simplify.py [--models NAME ...] [--tools NAME ...] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _measure  # noqa: E402
import generate  # noqa: E402

RUNNERS = HERE / "_simplify_runners.py"
#: graphkit-ort: ``simplify(target="onnxruntime")`` (ONNX Runtime's contrib operators, as onnxsim's default).
TOOLS = ("graphkit", "graphkit-ort", "onnxsim", "onnxslim", "polygraphy")
LIGHT = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"


# ------------------------------------------------------------------------- exporter-style models


def _exported_transformer(*, static: bool, layers: int = 4, hidden: int = 256, heads: int = 4,
                          seq: int = 64, seed: int = 0) -> onnx.ModelProto:
    """An encoder as torch.onnx writes one: Constant nodes for every scalar and shape piece, the
    attention's head split and merge computed from ``Shape(x)``, Identity on a tied weight, Dropout."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    counter = iter(range(10**6))

    def const(value: np.ndarray) -> str:
        name = f"/Constant_{next(counter)}_output_0"
        nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name + "_v")))
        return name

    def node(op: str, inputs: list[str], **attrs: object) -> str:
        name = f"/{op}_{next(counter)}"
        nodes.append(helper.make_node(op, inputs, [name + "_output_0"], name=name, **attrs))
        return name + "_output_0"

    def weight(name: str, shape: tuple[int, ...]) -> str:
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) / math.sqrt(shape[0])).astype(np.float32), name))
        return name

    head = hidden // heads
    x = "x"
    shared = weight("shared.weight", (hidden, hidden))
    for layer in range(layers):
        p = f"layers.{layer}"
        shape = node("Shape", [x])
        batch = node("Unsqueeze", [node("Gather", [shape, const(np.array(0, np.int64))], axis=0), const(np.array([0], np.int64))])
        length = node("Unsqueeze", [node("Gather", [shape, const(np.array(1, np.int64))], axis=0), const(np.array([0], np.int64))])
        split = node("Concat", [batch, length, const(np.array([heads], np.int64)), const(np.array([head], np.int64))], axis=0)
        parts = []
        for proj in ("q", "k", "v"):
            w = weight(f"{p}.{proj}.weight", (hidden, hidden))
            h = node("Add", [node("MatMul", [x, node("Transpose", [w], perm=[1, 0])]), weight(f"{p}.{proj}.bias", (hidden,))])
            parts.append(node("Transpose", [node("Reshape", [h, split])], perm=[0, 2, 1, 3]))
        q, k, v = parts
        scale = node("Sqrt", [node("Cast", [const(np.array(head, np.int64))], to=TensorProto.FLOAT)])
        scores = node("Div", [node("MatMul", [q, node("Transpose", [k], perm=[0, 1, 3, 2])]), scale])
        context = node("MatMul", [node("Softmax", [scores], axis=-1), v])
        merge = node("Concat", [batch, length, const(np.array([hidden], np.int64))], axis=0)
        merged = node("Reshape", [node("Transpose", [context], perm=[0, 2, 1, 3]), merge])
        tied = node("Identity", [shared])
        attn = node("Dropout", [node("MatMul", [merged, tied])])
        x = node("LayerNormalization", [node("Add", [x, attn]), weight(f"{p}.ln1.weight", (hidden,)),
                                        weight(f"{p}.ln1.bias", (hidden,))], axis=-1, epsilon=1e-5)
        up = node("Add", [node("MatMul", [x, weight(f"{p}.fc1.weight", (hidden, 2 * hidden))]),
                          weight(f"{p}.fc1.bias", (2 * hidden,))])
        gelu = node("Mul", [node("Mul", [up, node("Add", [node("Erf", [node("Div", [up, const(np.array(math.sqrt(2), np.float32))])]),
                                                          const(np.array(1.0, np.float32))])]),
                            const(np.array(0.5, np.float32))])
        down = node("Add", [node("MatMul", [gelu, weight(f"{p}.fc2.weight", (2 * hidden, hidden))]),
                            weight(f"{p}.fc2.bias", (hidden,))])
        x = node("LayerNormalization", [node("Add", [x, down]), weight(f"{p}.ln2.weight", (hidden,)),
                                        weight(f"{p}.ln2.bias", (hidden,))], axis=-1, epsilon=1e-5)
    nodes.append(helper.make_node("Identity", [x], ["y"], name="/output/Identity"))
    dims: list[int | str] = [1, seq, hidden] if static else ["batch", "sequence", hidden]
    graph = helper.make_graph(nodes, "exported", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8,
                              producer_name="pytorch", producer_version="2.5")
    onnx.checker.check_model(model, full_check=True)
    return model


def models(root: Path, names: Sequence[str] | None) -> dict[str, Path]:
    """Model name -> path, generating the exporter-style and benchmark models when missing."""
    found: dict[str, Path] = {p.stem.removeprefix("light_"): p for p in sorted(LIGHT.glob("light_*.onnx"))}
    folder = root / "simplify"
    folder.mkdir(parents=True, exist_ok=True)
    for name, static in (("exported_static", True), ("exported_dynamic", False)):
        path = folder / f"{name}.onnx"
        if not path.exists():
            onnx.save(_exported_transformer(static=static), path)
        found[name] = path
    for key in generate.MODEL_KEYS:
        if names is None or key in names:
            found[key] = generate.generate(key, root)
    return {k: v for k, v in found.items() if names is None or k in names}


# ------------------------------------------------------------------------------- running the tools


def _available(tool: str) -> bool:
    if tool in ("graphkit", "graphkit-ort"):
        return True
    if tool == "polygraphy":
        return shutil.which("polygraphy", path=str(Path(sys.executable).parent)) is not None
    try:
        __import__(tool)
    except ImportError:
        return False
    return True


def _job(tool: str, model: Path, out_dir: Path, external: bool) -> _measure.Job:
    output = out_dir / "model.onnx"
    env = _measure.child_env(HERE.parent)
    if tool == "polygraphy":
        import _simplify_runners

        argv = _simplify_runners.polygraphy_argv(str(model), str(output), external)
        argv[0] = shutil.which("polygraphy", path=str(Path(sys.executable).parent)) or "polygraphy"
        return _measure.Job(tool, tuple(argv), env, cwd=str(out_dir), output=str(output))
    function = {"floor": "floor", "graph-only": "graph_only", "graphkit": "graphkit_simplify",
                "graphkit-ort": "graphkit_simplify_ort",
                "onnxsim": "onnxsim_simplify", "onnxslim": "onnxslim_simplify"}[tool]
    argv = _measure.python_call(RUNNERS, function, model=str(model), output=str(output), external=external)
    # (the output folder as working directory: onnxsim writes temporary weight files into it)
    return _measure.Job(tool, argv, env, cwd=str(out_dir), output=str(output))


def _node_count(path: Path) -> int:
    proto = onnx.load(str(path), load_external_data=False)
    total, stack = 0, [proto.graph]
    while stack:
        graph = stack.pop()
        total += len(graph.node)
        for n in graph.node:
            for a in n.attribute:
                stack.extend([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs))
    return total


def _feeds(path: Path) -> dict[str, np.ndarray]:
    proto = onnx.load(str(path), load_external_data=False)
    inits = {t.name for t in proto.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for value in proto.graph.input:
        if value.name in inits:
            continue
        tt = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else (2 if "batch" in d.dim_param else 16) for d in tt.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        feeds[value.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _outputs(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    return list(session.run(None, {k: v for k, v in feeds.items() if k in names}))


def _check(model: Path, output: Path, expected: list[np.ndarray] | None) -> tuple[int | None, float | None, str]:
    """Nodes left, max abs difference of the outputs against the original's, and a note."""
    try:
        nodes = _node_count(output)
    except Exception as err:  # a tool's output that onnx cannot read is a result, not a crash
        return None, None, f"unreadable: {str(err).splitlines()[0][:80]}"
    try:
        onnx.checker.check_model(str(output), full_check=True)
    except Exception as err:
        return nodes, None, f"invalid: {str(err).splitlines()[0][:80]}"
    if expected is None:
        return nodes, None, "not run"
    try:
        found = _outputs(output, _feeds(model))
    except Exception as err:
        return nodes, None, f"does not run: {str(err).splitlines()[0][:80]}"
    if len(found) != len(expected):
        return nodes, None, "different outputs"
    diff = max((float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0)
               for a, b in zip(found, expected))
    return nodes, diff, ""


def bench_model(name: str, path: Path, tools: Sequence[str], repeat: int, timeout: float) -> list[dict[str, object]]:
    external = generate.uses_external_data(name) if name in generate.MODEL_KEYS else False
    warm = [path] + ([path.parent / generate.DATA_FILE] if external else [])
    jobs = [t for t in tools if _available(t)]
    names = list(jobs) + (["graph-only"] if external else [])
    work = Path(tempfile.mkdtemp(prefix=f"bench-simplify-{name}-"))
    made: dict[str, Path] = {}

    def factory(tool: str):  # type: ignore[no-untyped-def]
        def make() -> _measure.Job:
            out = work / f"{tool}-{len(list(work.glob(tool + '-*')))}"
            out.mkdir()
            return _job(tool, path, out, external)
        return make

    def after(job: _measure.Job, result: _measure.RunResult) -> _measure.RunResult:
        if job.output and result.ok and job.name not in made:
            made[job.name] = Path(job.output)
        elif job.output and job.name in made and Path(job.output) != made[job.name]:
            shutil.rmtree(Path(job.output).parent, ignore_errors=True)
        return result

    trials = _measure.measure_against_floor(factory("floor"), [factory(t) for t in names], repeat=repeat,
                                            timeout=timeout, warm=warm, after_run=after)
    try:
        expected = _outputs(path, _feeds(path))
    except Exception:
        expected = None
    rows: list[dict[str, object]] = []
    for tool in [*tools, *(["graph-only"] if external else [])]:
        if tool not in names:
            rows.append({"model": name, "tool": tool, "note": "not installed"})
            continue
        summary = _measure.summarize(tool, trials)
        row: dict[str, object] = {"model": name, "tool": tool, "time_x": summary.time_ratio, "mem_x": summary.mem_ratio,
                                  "wall_s": summary.wall_s, "peak_mb": summary.peak_mb}
        if tool in made and tool != "graph-only":
            nodes, diff, note = _check(path, made[tool], expected)
            row.update(nodes=nodes, max_abs=diff, note=note)
        elif summary.error:
            row["note"] = f"fails: {summary.error[:100]}"
        rows.append(row)
    floor = _measure.summarize("floor", trials)
    rows.append({"model": name, "tool": "floor", "wall_s": floor.wall_s, "peak_mb": floor.peak_mb,
                 "nodes": _node_count(path)})
    shutil.rmtree(work, ignore_errors=True)
    return rows


def _fmt(row: dict[str, object]) -> str:
    def num(key: str, spec: str) -> str:
        value = row.get(key)
        return "-" if value is None else format(value, spec)
    return (f"{row['model']:<18} {row['tool']:<11} {num('nodes', 'd'):>6} {num('time_x', '.2f'):>7} "
            f"{num('mem_x', '.2f'):>6} {num('wall_s', '.2f'):>8} {num('peak_mb', '.0f'):>8} {num('max_abs', '.1e'):>8}  "
            f"{row.get('note', '')}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", help="model names (light model stems, exported_static, "
                        "exported_dynamic, transformer, many_nodes, big_external); default all")
    parser.add_argument("--tools", nargs="+", default=list(TOOLS), choices=TOOLS)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--root", type=Path, default=generate.default_root())
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    rows: list[dict[str, object]] = []
    print(f"{'model':<18} {'tool':<11} {'nodes':>6} {'time×':>7} {'mem×':>6} {'wall s':>8} {'peak MB':>8} {'max abs':>8}")
    try:
        for name, path in models(args.root, args.models).items():
            for row in bench_model(name, path, args.tools, args.repeat, args.timeout):
                rows.append(row)
                print(_fmt(row), flush=True)
    finally:
        _measure.shutdown()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
