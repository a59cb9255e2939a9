"""Loading and inspecting a model with 2.7 GB of external weights: time and peak memory.

    python bench/bench_load.py [--repeat 3] [--small]

graphkit's load, inspect and check read the graph only; the weights stay on disk. The comparison is
onnx.load with its external data (what most tools do) and onnx.load without it (the floor for
reading the graph). Each runs in its own process (see _measure.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _measure
import generate

ROOT = Path(__file__).resolve().parent.parent

SNIPPETS = {
    "onnx.load (graph only)": "import onnx,sys; onnx.load(sys.argv[1], load_external_data=False)",
    "onnx.load (with weights)": "import onnx,sys; onnx.load(sys.argv[1])",
    "graphkit.load": "import graphkit,sys; graphkit.load(sys.argv[1])",
}
CLI = {
    "graphkit inspect": ["inspect"],
    "graphkit check": ["check"],
}


def jobs(model: Path) -> list[_measure.Job]:
    env = _measure.child_env(ROOT)
    found = [_measure.Job(name, (sys.executable, "-c", code, str(model)), env=env) for name, code in SNIPPETS.items()]
    found += [_measure.Job(name, (sys.executable, "-m", "graphkit", *args, str(model)), env=env)
              for name, args in CLI.items()]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    model = generate.generate("big_external", small=args.small)
    files = generate.model_files("big_external", small=args.small)
    weights = sum(p.stat().st_size for p in files if p.suffix != ".onnx")
    print(f"model {model}: {weights / 2**30:.2f} GiB of external weights, {os.cpu_count()} cores")
    results: dict[str, list[_measure.RunResult]] = {}
    try:
        for _ in range(args.repeat):
            for job in jobs(model):
                _measure.warm_cache(files)
                results.setdefault(job.name, []).append(_measure.run(job, timeout=600))
    finally:
        _measure.shutdown()
    print(f"{'what':<28}{'wall s':>9}{'peak MiB':>10}{'vs weights':>12}")
    for name, runs in results.items():
        ok = [r for r in runs if r.ok]
        if not ok:
            print(f"{name:<28} failed: {runs[-1].error}")
            continue
        wall = statistics.median(r.wall_s for r in ok)
        peak = statistics.median(r.peak_mb for r in ok)
        print(f"{name:<28}{wall:>9.2f}{peak:>10.0f}{peak * 2**20 / weights:>11.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
