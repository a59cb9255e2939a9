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
    """Build output = a*x + b bottom-up with graphkit's builders (the seed's first model)."""
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
    step("inspect the seed's branchy conv net", "inspect", str(FIX / "whole_model.onnx"))
    step("toposort it (already sorted: unchanged)", "toposort", str(FIX / "whole_model.onnx"), str(out / "sorted.onnx"))
    step("a model with external weights", "inspect", str(FIX / "ext_weights" / "model.onnx"))
    step("an unknown file is one clear error (exit 2)", "inspect", str(out / "missing.onnx"), expect=(2,))
    print(f"\ntour finished; outputs are in {out}")


if __name__ == "__main__":
    main()
