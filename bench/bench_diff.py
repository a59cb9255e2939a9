"""Benchmark ``graphkit.diff`` scaling: chains of 1k, 5k, 20k and 50k nodes.

Each model is a chain of Add/Mul/Relu nodes, each Add and Mul reading its own small initializer. Three
pairs are diffed per size, each in memory (the load is not timed):

- ``named``: two identical copies, every node named (all pairs found by name);
- ``unnamed``: two identical copies, no node named (all pairs found by structure);
- ``edited``: unnamed copies where B has every 100th Relu replaced by a Sigmoid and its weights renamed,
  so structure matching, renamed weights and the change list all do work.

The table gives the CPU seconds of one diff (median of ``--repeat``; CPU time, so that other processes on
the machine do not blur it), its wall time, and CPU microseconds per node; a linear diff keeps the
per-node column flat as the size grows.

Examples::

    python bench/bench_diff.py
    python bench/bench_diff.py --sizes 1000 5000 --repeat 3 --json /tmp/diff.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import graphkit as gk

SIZES = (1000, 5000, 20000, 50000)
PAIRS = ("named", "unnamed", "edited")


def chain(nodes: int, *, named: bool, edited: bool = False) -> gk.Model:
    """A chain of ``nodes`` Add/Mul/Relu nodes over a [1, 4] float input."""
    ops = ("Add", "Mul", "Relu")
    graph_nodes = []
    weights = []
    prev = "x"
    for i in range(nodes):
        op = ops[i % 3]
        if edited and op == "Relu" and i % 100 == 2:
            op = "Sigmoid"
        out = f"t{i}"
        inputs = [prev]
        if op in ("Add", "Mul"):
            w = f"{'w_new' if edited and i % 100 == 0 else 'w'}{i}"
            weights.append(numpy_helper.from_array(np.full([4], 1.0 + (i % 7) / 100, np.float32), w))
            inputs.append(w)
        graph_nodes.append(helper.make_node(op, inputs, [out], name=f"n{i}" if named else ""))
        prev = out
    graph = helper.make_graph(graph_nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 4])], weights)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return gk.Model(proto, Path.cwd())


def pair(nodes: int, kind: str) -> tuple[gk.Model, gk.Model]:
    """The two models diffed for one size and pair kind."""
    if kind == "named":
        return chain(nodes, named=True), chain(nodes, named=True)
    if kind == "unnamed":
        return chain(nodes, named=False), chain(nodes, named=False)
    return chain(nodes, named=False), chain(nodes, named=False, edited=True)


def measure(nodes: int, kind: str, repeat: int) -> dict[str, object]:
    """Median seconds of ``repeat`` diffs of one pair, with the diff's counts."""
    a, b = pair(nodes, kind)
    cpu, wall = [], []
    result = None
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        result = gk.diff(a, b)
        cpu.append(time.process_time() - started_cpu)
        wall.append(time.perf_counter() - started)
    assert result is not None
    seconds = statistics.median(cpu)
    return {"nodes": nodes, "pair": kind, "cpu_seconds": round(seconds, 3), "wall_seconds": round(statistics.median(wall), 3),
            "us_per_node": round(seconds / nodes * 1e6, 1), "changes": len(result.changes),
            "by_name": result.matched_by_name, "by_structure": result.matched_by_structure}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--pairs", nargs="+", choices=PAIRS, default=list(PAIRS))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args()
    rows = []
    print(f"{'nodes':>7} {'pair':<8} {'cpu s':>8} {'wall s':>8} {'us/node':>8} {'changes':>8} {'by name':>8} "
          f"{'by struct':>9}")
    for nodes in args.sizes:
        for kind in args.pairs:
            row = measure(nodes, kind, args.repeat)
            rows.append(row)
            print(f"{nodes:>7} {kind:<8} {row['cpu_seconds']:>8} {row['wall_seconds']:>8} {row['us_per_node']:>8} {row['changes']:>8} "
                  f"{row['by_name']:>8} {row['by_structure']:>9}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    onnx.checker.check_model(chain(10, named=True).proto)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
