"""A short tour of graphkit on the bundled fixtures: each step is a real CLI command, shown and run.

    python3 dev.py tour [--out DIR]
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"


def step(title: str, *args: str, expect: tuple[int, ...] = (0,)) -> None:
    cmd = [sys.executable, "-m", "graphkit", *args]
    print(f"\n== {title}\n$ python -m graphkit {' '.join(shlex.quote(a) for a in args)}", flush=True)
    code = subprocess.run(cmd, cwd=ROOT).returncode
    if code not in expect:
        raise SystemExit(f"tour step failed with exit code {code}: {title}")


def build_linear_func(out: Path) -> Path:
    """Build output = a*x + b bottom-up with graphkit's builders."""
    sys.path.insert(0, str(ROOT))
    import graphkit as gk

    b = gk.GraphBuilder("linear_func")
    a, x, c = (b.input(n, "float32", [10, 10]) for n in ("a", "x", "b"))
    b.node("Add", [b.node("Mul", [a, x], name="Mul"), c], name="Add", outputs=["output"])
    b.output("output", "float32", [10, 10])
    path = out / "linear_func.onnx"
    gk.save(b.build(), path)
    print(f"\n== build linear_func with GraphBuilder -> {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tour-out", help="where to write (default: tour-out/)")
    out = parser.parse_args().out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    linear = build_linear_func(out)
    step("inspect it", "inspect", str(linear))
    step("check it", "check", str(linear))
    step("turn its Add into a Sub (edit)", "edit", str(linear), str(out / "linear_sub.onnx"), "--set-op-type", "Add=Sub")
    step("check the edited model", "check", str(out / "linear_sub.onnx"))
    step("make the Resize scales of SRCNN an input named factor", "edit", str(FIX / "srcnn.onnx"),
         str(out / "srcnn_factor.onnx"), "--input-from-constant", "/Constant_output_0=factor")
    step("make model_static's batch dim dynamic", "edit", str(FIX / "model_static.onnx"),
         str(out / "model_dynamic_0.onnx"), "--dynamic", "in:0=batch")
    step("inspect a branchy conv net", "inspect", str(FIX / "whole_model.onnx"))
    step("toposort it (already sorted: unchanged)", "toposort", str(FIX / "whole_model.onnx"), str(out / "sorted.onnx"))
    whole = str(FIX / "whole_model.onnx")
    step("extract the middle of it", "extract", whole, str(out / "middle.onnx"),
         "--inputs", "/convs1/convs1.2/Conv_output_0", "--outputs", "/convs4/convs4.0/Conv_output_0")
    step("an open cut is refused, naming the leak (exit 2)", "extract", whole, str(out / "bad.onnx"),
         "--inputs", "/convs2/convs2.1/Conv_output_0", "--outputs", "output", expect=(2,))
    step("expose the Add's output", "expose", whole, str(out / "more.onnx"), "--op-types", "Add")
    step("run it with seeded inputs", "run", str(out / "more.onnx"), "--seed", "1")
    step("dynamic axes: a batch of 2 fits model_dynamic_0", "run", str(FIX / "model_dynamic_0.onnx"),
         "--shape", "in=2x3x10x10")
    step("… but not model_static (exit 2)", "run", str(FIX / "model_static.onnx"), "--shape", "in=2x3x10x10",
         expect=(2,))
    step("split whole_model into 3 fragments", "split", whole, str(out / "parts"), "--parts", "3", "--overwrite")
    step("chain-run the fragments against the whole model", "run-chain", str(out / "parts"), "--opt-level", "disable")
    step("markers: Debug nodes become exposed Identity nodes", "markers", str(FIX / "debug_markers.onnx"),
         str(out / "debug_identity.onnx"), "--overwrite")
    step("record reference values by marker name", "run", str(out / "debug_identity.onnx"), "--opt-level", "disable",
         "--save", str(out / "ref.npz"))
    step("compare the marked model against them", "compare", str(FIX / "debug_markers.onnx"), "--reference",
         str(out / "ref.npz"))
    step("plant a bug deep inside whole_model (Add -> Sub)", "edit", whole, str(out / "planted.onnx"),
         "--set-op-type", "/Add=Sub", "--overwrite")
    step("compare finds the first node where the numbers go wrong (exit 1)", "compare", whole,
         str(out / "planted.onnx"), expect=(1,))
    step("diff says what changed (exit 1)", "diff", whole, str(out / "planted.onnx"), expect=(1,))
    step("merge two models: my_add's output feeds asinh", "merge", str(FIX / "my_add.onnx"), str(FIX / "asinh.onnx"),
         str(out / "merged.onnx"), "--connect", "output=input", "--prefixes", "a/", "b/", "--overwrite")
    step("save a minimal repro of the planted bug (exit 1)", "compare", whole, str(out / "planted.onnx"),
         "--save-repro", str(out / "repro"), "--overwrite", expect=(1,))
    step("reduce finds the same node without compare", "reduce", whole, str(out / "reduced"), "--candidate",
         str(out / "planted.onnx"), "--fails-on", "compare", "--overwrite")
    step("type every tensor, Loop and Scan bodies included", "infer-shapes", str(FIX / "loop_scan.onnx"),
         str(out / "typed.onnx"))
    step("simplify folds what depends on constants only", "simplify", str(FIX / "if_outer_scope.onnx"),
         str(out / "simple.onnx"))
    step("convert whole_model to float16", "convert", whole, str(out / "half.onnx"), "--float16")
    step("… and compare it with the float32 original", "compare", whole, str(out / "half.onnx"))
    step("convert to an older opset", "convert", str(FIX / "if_outer_scope.onnx"), str(out / "opset12.onnx"),
         "--opset", "12")
    step("a model with external weights", "inspect", str(FIX / "ext_weights" / "model.onnx"))
    step("… runs from where its weights lie", "run", str(FIX / "ext_weights" / "model.onnx"), "--shape", "x=4x64")
    step("an unknown file is one clear error (exit 2)", "inspect", str(out / "missing.onnx"), expect=(2,))
    print(f"\ntour finished; outputs are in {out}")
    print("view, the one verb left out, serves a page until Ctrl-C: python -m graphkit view "
          f"{shlex.quote(str(out / 'planted.onnx'))} --around /Add --depth 1")


if __name__ == "__main__":
    main()
