"""Benchmark: removing the unused tail of a dead chain, which takes the whole chain with it.

    python bench/bench_remove.py [--sizes 500 1000 2000 4000] [--repeat 3] [--cli] [--json]

For each size N a model is built in memory: a live path ``x -> Relu -> y`` and, beside it, a dead
chain of N ``Add`` nodes, each adding its own small initializer, whose last output nothing reads.
``graphkit.remove_node(model, <last node>)`` removes that node and everything only it fed: the
other N - 1 nodes and their N initializers. Reported per N: the median CPU time of the call (copy,
removal, the no-op check and validation, as ``edit --remove-node`` does before writing), its ratio
to the smallest N's, and that ratio divided by the size ratio (1.0 is linear; quadratic work doubles
it with every doubling of N). CPU time ("work") rather than wall time, because on a shared machine
the wall time mostly measures the other processes. With ``--cli`` the same edit is also measured end
to end as ``python -m graphkit edit IN OUT --remove-node NAME`` in a fresh process (its CPU time,
interpreter start and imports included).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import graphkit as gk  # noqa: E402


def dead_chain(size: int) -> gk.Model:
    """A live Relu beside a dead chain of ``size`` Adds; the chain's last node is ``dead_<size-1>``."""
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="live")]
    inits = []
    prev = "x"
    for i in range(size):
        inits.append(numpy_helper.from_array(np.full(4, i, np.float32), f"w_{i}"))
        nodes.append(helper.make_node("Add", [prev, f"w_{i}"], [f"t_{i}"], name=f"dead_{i}"))
        prev = f"t_{i}"
    graph = helper.make_graph(
        nodes, "dead_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], initializer=inits,
    )
    return gk.Model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def time_api(size: int, repeat: int) -> float:
    """Median CPU seconds of ``remove_node`` on the tail of a ``size``-node dead chain."""
    model = dead_chain(size)
    gk.remove_node(dead_chain(2), "dead_1")  # (imports the edit module outside the measurement)
    times = []
    for _ in range(repeat):
        start = time.process_time()
        result = gk.remove_node(model, f"dead_{size - 1}")
        times.append(time.process_time() - start)
        assert [n.name for n in result.graph.node] == ["live"] and not result.graph.initializer
    return statistics.median(times)


def time_cli(size: int, repeat: int, folder: Path) -> float:
    """Median CPU seconds of ``python -m graphkit edit --remove-node`` in a fresh process."""
    source, target = folder / f"chain_{size}.onnx", folder / f"chain_{size}_removed.onnx"
    gk.save(dead_chain(size), source)
    times = []
    for _ in range(repeat):
        target.unlink(missing_ok=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-m", "graphkit", "edit", str(source), str(target), "--remove-node",
                        f"dead_{size - 1}"], check=True, capture_output=True, cwd=HERE.parent)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000, 4000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cli", action="store_true", help="also time the CLI end to end")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            row = {"nodes": size, "api_s": time_api(size, args.repeat)}
            if args.cli:
                row["cli_s"] = time_cli(size, args.repeat, Path(tmp))
            rows.append(row)
    base = rows[0]
    for row in rows:
        row["vs_first"] = row["api_s"] / base["api_s"]
        row["vs_linear"] = row["vs_first"] / (row["nodes"] / base["nodes"])
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'nodes':>6}  {'remove_node':>11}  {'x first':>7}  {'/ linear':>8}" + (f"  {'CLI':>7}" if args.cli else ""))
    for row in rows:
        cli = f"  {row['cli_s']:6.2f}s" if args.cli else ""
        print(f"{row['nodes']:>6}  {row['api_s']:10.3f}s  {row['vs_first']:6.2f}x  {row['vs_linear']:7.2f}x{cli}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
