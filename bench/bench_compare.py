"""Benchmark the memory of a full per-tensor comparison against a plain run and against exposing everything.

For a model of the extract benchmark (``generate.py``), each job runs in its own process:

- ``plain``: load + one ONNX Runtime run (the floor);
- ``expose-all``: every node output made a graph output, one session, one run — what "mark all"
  tools do, and what runs out of memory on large models;
- ``compare``: ``graphkit.compare`` of ORT (all optimizations) against ORT (none) over every tensor,
  fragment by fragment (``--fragment-mb``, default 256 and 64).

The table gives peak RSS, wall time, ratios to the floor of the same repetition and, for
expose-all, how many MiB of tensors it held at once.

The transformer is generated with its sequence length set by ``--seq`` (default 512: the
activations, not the weights, then dominate an expose-all run); ``big_external`` is the 2.7 GB
external-weights model (each fragment session loads only its own weights). ``--small`` uses the
tiny variants.

Models may also be the onnx wheel's light models (``light`` for all nine, or ``light_resnet50``...:
every weight is made by a ConstantOfShape node, many tensors per MB), ``dyn_transformer`` (the
benchmark folder's transformer with symbolic dims and external weights) or any ``.onnx`` path;
``--seq 0`` takes the benchmark's stock transformer (sequence 128) instead of generating one.

    python bench/bench_compare.py --small
    python bench/bench_compare.py                    # transformer (seq 512) and big_external: ~3 min
    python bench/bench_compare.py --models light --fragment-mb 64 --repeat 3
    python bench/bench_compare.py --models transformer dyn_transformer many_nodes --seq 0 --fragment-mb 64
    python bench/bench_compare.py --models b --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _measure
import generate
import onnx

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
RUNNERS = HERE / "_compare_runners.py"


LIGHT = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"


def _models(names: list[str]) -> list[str]:
    """The model names, ``light`` expanded to the nine light models."""
    found: list[str] = []
    for name in names:
        found += sorted(p.stem for p in LIGHT.glob("light_*.onnx")) if name == "light" else [name]
    return found


def _model(name: str, small: bool, seq: int) -> Path:
    if name.startswith("light_"):
        return LIGHT / f"{name}.onnx"
    if name == "dyn_transformer":
        return generate.default_root() / "dyn_transformer" / "model.onnx"
    if name.endswith(".onnx"):
        return Path(name)
    key = generate.resolve_key(name)
    if small or key != "transformer" or seq == 0:
        return generate.generate(key, small=small)
    base = generate.CONFIGS[False]["transformer"]
    assert isinstance(base, generate.TransformerConfig)
    cfg = generate.TransformerConfig(layers=base.layers, hidden=base.hidden, heads=base.heads, ffn=base.ffn, seq=seq)
    path = generate.default_root() / f"transformer_seq{seq}.onnx"
    if not path.exists():
        generate._save_atomic(generate.build_transformer(cfg), path)
    return path


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": str(REPO_ROOT) + (os.pathsep + path if path else "")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["transformer", "big_external"],
                        help="models of the extract benchmark: transformer (a), many_nodes (b), big_external (c); "
                             "light, light_<name>, dyn_transformer or an .onnx path")
    parser.add_argument("--small", action="store_true", help="the tiny variants (seconds)")
    parser.add_argument("--seq", type=int, default=512,
                        help="sequence length of the transformer (default 512; 0: the stock transformer.onnx)")
    parser.add_argument("--fragment-mb", type=float, nargs="+", default=[256.0, 64.0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    report = []
    for name in _models(args.models):
        model = _model(name, args.small, args.seq)
        report.append({"model": str(model), "rows": _bench(model, args)})
    _measure.shutdown()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


def _bench(model: Path, args: argparse.Namespace) -> list[dict[str, object]]:
    env = _env()

    def job(name: str, function: str, **kwargs: object):  # type: ignore[no-untyped-def]
        return lambda: _measure.Job(name, _measure.python_call(RUNNERS, function, model=str(model), **kwargs),
                                    env, str(REPO_ROOT))

    jobs = [job("expose-all", "expose_all")]
    jobs += [job(f"compare {mb:g} MiB", "graphkit_compare", fragment_mb=mb) for mb in args.fragment_mb]
    extras: dict[str, dict[str, object]] = {}

    def remember(trial: _measure.Trial) -> None:
        extras[trial.job] = {k: v for k, v in trial.run.result.items() if k != "work_s"} if trial.run.ok else {}
        if not trial.run.ok:
            print(f"{trial.job}: FAILED {trial.run.error}", file=sys.stderr)

    data = model.parent / generate.DATA_FILE
    files = [model, data] if data.exists() and model.name == "model.onnx" else [model]
    size = sum(f.stat().st_size for f in files) / 2**20
    print(f"\nmodel {model} ({size:.0f} MiB with its weights)")
    trials = _measure.measure_against_floor(job("plain", "plain_run"), jobs, repeat=args.repeat, warm=files,
                                            on_trial=remember)
    names = ["plain", "expose-all", *[f"compare {mb:g} MiB" for mb in args.fragment_mb]]
    rows = []
    print(f"{'job':<18} {'peak MB':>9} {'x plain':>8} {'wall s':>8} {'x plain':>8}  notes")
    for name in names:
        s = _measure.summarize(name, trials)
        notes = ", ".join(f"{k} {v:.0f}" if isinstance(v, float) else f"{k} {v}" for k, v in extras.get(name, {}).items())
        print(f"{name:<18} {s.peak_mb or 0:>9.0f} {s.mem_ratio or 0:>8.2f} {s.wall_s or 0:>8.1f} "
              f"{s.time_ratio or 0:>8.2f}  {notes}")
        rows.append({**s.__dict__, "extra": extras.get(name, {})})
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
