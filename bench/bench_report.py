"""The size of compare's HTML report (``compare --html``) on real models: the onnx wheel's light
models compared against a planted edit (their first Add made a Sub, or for models without an Add
their first Relu a Sigmoid) and against their float16 conversion. Prints tensors, failures, the
page's size (and gzipped, as a mail client would not, for scale) and the time to build the page.

    nice -n 19 python bench/bench_report.py [--models light_inception_v1 light_resnet50]
"""

from __future__ import annotations

import argparse
import gzip
import time
from pathlib import Path

import onnx

import graphkit as gk

LIGHT = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"


def planted(model: gk.Model) -> tuple[gk.Model, str]:
    """The model with its first Add made a Sub (else its first Relu a Sigmoid)."""
    for op, other in (("Add", "Sub"), ("Relu", "Sigmoid")):
        node = next((n for n in model.proto.graph.node if n.op_type == op), None)
        if node is not None:
            return gk.set_op_type(model, node=node.name or f"#{list(model.proto.graph.node).index(node)}",
                                  op_type=other), f"{op}->{other}"
    raise SystemExit(f"{model.name}: no Add or Relu to plant an edit on")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["light_inception_v1", "light_resnet50"])
    args = parser.parse_args()
    from graphkit._report import packed_plotly_js

    start = time.perf_counter()

    packed_plotly_js()
    print(f"plotly.js packed once per process: {time.perf_counter() - start:.2f} s")
    print(f"{'model':22} {'candidate':16} {'tensors':>7} {'failed':>6} {'page':>9} {'gzipped':>9} {'build':>7}")
    for name in args.models:
        model = gk.load(LIGHT / f"{name}.onnx")
        edited, what = planted(model)
        for label, candidate in ((what, edited), ("float16", gk.to_float16(model))):
            result = gk.compare(model, candidate)
            start = time.perf_counter()
            page = result.to_html(candidate).encode("utf-8")
            took = time.perf_counter() - start
            print(f"{name:22} {label:16} {len(result.tensors):7} {len(result.failed):6} "
                  f"{len(page) / 1e6:7.2f} MB {len(gzip.compress(page)) / 1e6:7.2f} MB {took:6.2f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
