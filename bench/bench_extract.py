"""Benchmark sub-model extraction: graphkit against onnx, onnx-graphsurgeon and Polygraphy.

For every model and slice (see ``generate.py``) each tool runs load -> extract -> save in its
own process, alternating with the floor (``onnx.load`` + ``onnx.save`` of the whole model; with
external data for the external-data model). The table gives medians of wall time (process
start to exit, imports included), the time the tool reported after its imports ("work"), peak
RSS, the size of what it wrote, and the ratios of time and memory to the floor of the same
repetition. Outputs go to a temporary folder, are checked (the graph's inputs and outputs are
the slice's, external data files exist) and deleted after each run.

Models are generated on first use (``generate.py``); ``--small`` uses tiny variants so the
whole run takes seconds.

Examples::

    python bench/bench_extract.py --small
    python bench/bench_extract.py --models a c --repeat 3
    python bench/bench_extract.py --models c --slices tenth --tools floor onnx polygraphy
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _measure
import generate
from _measure import Job, RunResult, Trial
from generate import Slice

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RUNNERS = BENCH_DIR / "_runners.py"
FLOOR = "floor"


@dataclass(frozen=True)
class Case:
    """One model and slice to extract, and where the run writes.

    ``meta`` gives (dtype, shape) of the slice's boundary tensors, for tools that accept them.
    """

    model_key: str
    model: Path
    slice: Slice
    output: Path
    external: bool
    meta: Mapping[str, tuple[str, tuple[int, ...]]]


@dataclass(frozen=True)
class Tool:
    """A benchmarked tool: how to build its command and, optionally, how to check it is usable.

    Attributes:
        name: Label in the table.
        argv: Command line for a case.
        probe: Command that exits 0 if the tool is usable (None: always usable).
    """

    name: str
    argv: Callable[[Case], tuple[str, ...]]
    probe: tuple[str, ...] | None = None


def _runner(function: str, *, with_slice: bool = True) -> Callable[[Case], tuple[str, ...]]:
    def argv(case: Case) -> tuple[str, ...]:
        kwargs: dict[str, object] = {
            "model": str(case.model),
            "output": str(case.output),
            "external": case.external,
        }
        if with_slice:
            kwargs.update(inputs=list(case.slice.inputs), outputs=list(case.slice.outputs))
        return _measure.python_call(RUNNERS, function, **kwargs)

    return argv


def _polygraphy_executable() -> str:
    local = Path(sys.executable).with_name("polygraphy")
    return str(local) if local.exists() else shutil.which("polygraphy") or "polygraphy"


def _polygraphy(explicit_meta: bool) -> Callable[[Case], tuple[str, ...]]:
    """``polygraphy surgeon extract`` with ``auto`` metadata or with the boundary's dtype and shape."""

    def input_meta(case: Case, name: str) -> str:
        if not explicit_meta or name not in case.meta:
            return f"{name}:auto:auto"
        dtype, shape = case.meta[name]
        return f"{name}:[{','.join(map(str, shape))}]:{dtype}"

    def output_meta(case: Case, name: str) -> str:
        known = explicit_meta and name in case.meta
        return f"{name}:{case.meta[name][0] if known else 'auto'}"

    def argv(case: Case) -> tuple[str, ...]:
        args = [_polygraphy_executable(), "surgeon", "extract", str(case.model)]
        args += ["--inputs", *(input_meta(case, name) for name in case.slice.inputs)]
        args += ["--outputs", *(output_meta(case, name) for name in case.slice.outputs)]
        args += ["-o", str(case.output)]
        if case.external:
            args += ["--save-external-data", generate.DATA_FILE]
        return tuple(args)

    return argv


TOOLS: tuple[Tool, ...] = (
    Tool("graphkit", _runner("graphkit_extract"), _measure.python_call(RUNNERS, "graphkit_probe")),
    Tool("onnx", _runner("onnx_utils_extract")),
    Tool("graphsurgeon", _runner("graphsurgeon_extract")),
    Tool("polygraphy", _polygraphy(explicit_meta=False), (_polygraphy_executable(), "--version")),
    Tool("polygraphy-meta", _polygraphy(explicit_meta=True), (_polygraphy_executable(), "--version")),
)
FLOOR_TOOL = Tool(FLOOR, _runner("floor", with_slice=False))


# ---------------------------------------------------------------------------------------------
# Checking and cleaning up outputs


def _folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def _check_output(path: Path, expected: Slice | None) -> str | None:
    """Why the written model is not the expected slice, or None if it is."""
    if not path.exists():
        return f"no output at {path.name} (wrote: {sorted(p.name for p in path.parent.iterdir())})"
    proto = onnx.load(str(path), load_external_data=False)
    missing = sorted(
        {e.value for t in proto.graph.initializer for e in t.external_data if e.key == "location"}
        - {p.name for p in path.parent.iterdir()}
    )
    if missing:
        return f"external data file(s) missing next to the output: {', '.join(missing)}"
    if expected is not None:
        got_in = sorted(
            i.name for i in proto.graph.input if i.name not in {t.name for t in proto.graph.initializer}
        )
        got_out = sorted(o.name for o in proto.graph.output)
        if got_in != sorted(expected.inputs) or got_out != sorted(expected.outputs):
            return f"wrong boundary: inputs {got_in}, outputs {got_out}"
    try:
        onnx.checker.check_model(str(path))
    except onnx.checker.ValidationError as err:
        return f"checker: {str(err).splitlines()[0]}"
    return None


def _after_run(cases: dict[str, Case]) -> Callable[[Job, RunResult], RunResult]:
    """Check, measure and delete a run's output; an invalid output is flagged in ``result["invalid"]``."""

    def after(job: Job, result: RunResult) -> RunResult:
        case = cases.pop(job.output or "")
        folder = case.output.parent
        try:
            if not result.ok:
                return result
            problem = _check_output(case.output, None if job.name == FLOOR else case.slice)
            extra = {**result.result, "out_mb": _folder_mb(folder)}
            if problem:  # keep the figures, flag the artifact
                extra["invalid"] = problem
            return dataclasses.replace(result, result=extra)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    return after


# ---------------------------------------------------------------------------------------------
# Running


def probe_tools(tools: Sequence[Tool]) -> tuple[list[Tool], dict[str, str]]:
    """Split ``tools`` into the usable ones and {name: reason} for the unavailable ones."""
    usable, unavailable = [], {}
    for tool in tools:
        if tool.probe is None:
            usable.append(tool)
            continue
        result = _measure.run(Job(tool.name, tool.probe, _measure.child_env(REPO_ROOT), str(REPO_ROOT)), timeout=120)
        if result.ok:
            usable.append(tool)
        else:
            unavailable[tool.name] = result.error or "probe failed"
    return usable, unavailable


def _job_factory(tool: Tool, template: Case, workdir: Path, cases: dict[str, Case]) -> Callable[[], Job]:
    """Jobs running ``tool`` on ``template``'s slice, each writing to a fresh folder."""

    def make() -> Job:
        folder = Path(tempfile.mkdtemp(prefix=f"{tool.name}-", dir=workdir))
        case = dataclasses.replace(template, output=folder / "model.onnx")
        cases[str(case.output)] = case
        return Job(tool.name, tool.argv(case), _measure.child_env(REPO_ROOT), str(folder), str(case.output))

    return make


def boundary_meta(model: Path, names: Iterable[str]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """(numpy dtype name, static shape) of those of ``names`` that ONNX shape inference can type."""
    try:
        proto = onnx.shape_inference.infer_shapes(onnx.load(str(model), load_external_data=False))
    except Exception as err:  # the benchmark goes on; polygraphy-meta falls back to auto
        print(f"shape inference failed on {model}: {err}", file=sys.stderr)
        return {}
    infos = [*proto.graph.input, *proto.graph.value_info, *proto.graph.output]
    wanted = set(names)
    meta = {}
    for info in infos:
        if info.name in wanted:
            tensor_type = info.type.tensor_type
            dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type).name
            meta[info.name] = (dtype, tuple(d.dim_value for d in tensor_type.shape.dim))
    return meta


def _progress(key: str, slice_: Slice) -> Callable[[Trial], None]:
    def report(trial: Trial) -> None:
        run = trial.run
        status = f"{run.wall_s:7.2f} s {run.peak_mb:8.0f} MB" if run.ok else f"FAILED: {run.error}"
        if run.result.get("invalid"):
            status += f"  INVALID OUTPUT: {run.result['invalid']}"
        if trial.cached is not None:
            status += f"  (cache {trial.cached:.0%})"
        print(
            f"  [{key}/{slice_.name} #{trial.repetition + 1}] {trial.job:15} {status}",
            file=sys.stderr,
            flush=True,
        )

    return report


def _cache_note(before: _measure.CacheState, after: _measure.CacheState) -> str:
    def pct(state: _measure.CacheState) -> str:
        return "?" if state.resident is None else f"{state.resident:.0%}"

    free = _measure.available_memory_mb()
    note = f"{after.size_mb:,.1f} MB, page cache {pct(before)} before warm-up read ({after.read_s or 0:.1f} s), {pct(after)} after"
    return note + ("" if free is None else f"; {free:,.0f} MiB available")


def bench_model(
    key: str, args: argparse.Namespace, tools: Sequence[Tool], workdir: Path
) -> tuple[str, list[tuple[Slice, list[Trial]]]]:
    """Generate (if needed), warm and benchmark every selected slice of model ``key``.

    Returns:
        A note on the model's size and page-cache state, and the trials of each slice.
    """
    started = time.perf_counter()
    model = generate.generate(key, args.dir, small=args.small)
    files = generate.model_files(key, args.dir, small=args.small)
    if time.perf_counter() - started > 1:
        print(f"generated {model} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    before = _measure.cache_state(files)
    after = _measure.warm_cache(files)
    note = f"{key}: {model} — {_cache_note(before, after)}"
    print(note, file=sys.stderr)
    slices = [
        s for s in generate.slices_for(key, small=args.small) if not args.slices or s.name in args.slices
    ]
    meta = boundary_meta(model, {name for s in slices for name in (*s.inputs, *s.outputs)})
    results = []
    for slice_ in slices:
        cases: dict[str, Case] = {}
        # output is a placeholder: each job gets a fresh folder
        template = Case(key, model, slice_, workdir / "model.onnx", generate.uses_external_data(key), meta)
        trials = _measure.measure_against_floor(
            _job_factory(FLOOR_TOOL, template, workdir, cases),
            [_job_factory(tool, template, workdir, cases) for tool in tools],
            repeat=args.repeat,
            timeout=args.timeout,
            warm=files,
            after_run=_after_run(cases),
            on_trial=_progress(key, slice_),
        )
        results.append((slice_, trials))
    return note, results


# ---------------------------------------------------------------------------------------------
# Reporting


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table_rows(key: str, slice_: Slice, trials: Sequence[Trial], names: Sequence[str]) -> list[list[str]]:
    """One table row per job: figures are medians, ratios are to the floor of the same repetition."""
    share = f" {slice_.weight_share:.1%}" if slice_.weight_share is not None else ""
    rows = []
    for name in names:
        summary = _measure.summarize(name, trials)
        if summary.runs == 0:
            continue
        done = [t.run for t in trials if t.job == name and t.run.ok]
        out_mb = _measure.median([_number(r.result.get("out_mb")) for r in done])
        invalid = [str(r.result["invalid"]) for r in done if r.result.get("invalid")]
        notes = [f"{summary.failures}/{summary.runs} failed: {summary.error}"] if summary.failures else []
        notes += [f"{len(invalid)}/{summary.runs} invalid output: {invalid[-1]}"] if invalid else []
        note = "; ".join(notes)
        rows.append(
            [
                name,
                key,
                slice_.name + share,
                _fmt(summary.wall_s, ".2f"),
                _fmt(summary.work_s, ".2f"),
                _fmt(summary.peak_mb, ",.0f"),
                _fmt(out_mb, ",.1f"),
                _fmt(summary.time_ratio, ".2f"),
                _fmt(summary.mem_ratio, ".2f"),
                note,
            ]
        )
    return rows


HEADER = [
    "tool",
    "model",
    "slice (weights)",
    "wall s",
    "work s",
    "peak MB",
    "out MB",
    "x floor time",
    "x floor mem",
    "note",
]


def render(rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table; numeric columns right-aligned."""
    widths = [max(len(str(r[i])) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    numeric = {3, 4, 5, 6, 7, 8}

    def line(row: Sequence[str]) -> str:
        cells = [
            str(c).rjust(w) if i in numeric else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths))
        ]
        return "  ".join(cells).rstrip()

    return "\n".join([line(HEADER), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _trial_dict(key: str, slice_: Slice, trial: Trial) -> dict[str, object]:
    return {
        "model": key,
        "slice": dataclasses.asdict(slice_),
        "job": trial.job,
        "repetition": trial.repetition,
        "run": dataclasses.asdict(trial.run),
        "floor": dataclasses.asdict(trial.floor),
        "cached": trial.cached,
    }


# ---------------------------------------------------------------------------------------------
# Command line


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models", nargs="+", default=list(generate.MODEL_KEYS), help="model keys or aliases a b c"
    )
    parser.add_argument("--slices", nargs="+", default=None, help="only these slice names")
    parser.add_argument(
        "--tools",
        nargs="+",
        default=[t.name for t in TOOLS],
        help=f"tools to run, from {', '.join(t.name for t in TOOLS)} (the floor always runs)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="repetitions per slice (medians are reported)")
    parser.add_argument("--small", action="store_true", help="use the tiny model variants")
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="models folder (default $GRAPHKIT_BENCH_DIR or /tmp/graphkit-bench)",
    )
    parser.add_argument(
        "--tmp-dir", type=Path, default=None, help="where outputs are written (default: system temp)"
    )
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds per run (default 120 with --small, else 900)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every trial to this JSON file")
    args = parser.parse_args(argv)
    if args.timeout is None:
        args.timeout = 120.0 if args.small else 900.0
    return args


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the table; returns 0, or 2 on a usage error."""
    args = parse_args(argv)
    try:
        keys = [generate.resolve_key(m) for m in args.models]
    except KeyError as err:
        print(f"bench_extract: error: {err.args[0]}", file=sys.stderr)
        return 2
    unknown = sorted(set(args.tools) - {t.name for t in TOOLS} - {FLOOR})
    if unknown:
        print(
            f"bench_extract: error: unknown tool(s) {unknown}; choose from {[t.name for t in TOOLS]}",
            file=sys.stderr,
        )
        return 2
    tools, unavailable = probe_tools([t for t in TOOLS if t.name in args.tools])
    for name, reason in unavailable.items():
        print(f"{name}: unavailable ({reason})", file=sys.stderr)
    names = [FLOOR, *(t.name for t in tools)]
    rows: list[list[str]] = []
    dump: list[dict[str, object]] = []
    notes: list[str] = []
    signal.signal(signal.SIGTERM, _exit_on_signal)  # so that outputs are cleaned up
    with tempfile.TemporaryDirectory(prefix="graphkit-bench-out-", dir=args.tmp_dir) as tmp:
        try:
            for key in keys:
                note, results = bench_model(key, args, tools, Path(tmp))
                notes.append(note)
                for slice_, trials in results:
                    rows += table_rows(key, slice_, trials, names)
                    dump += [_trial_dict(key, slice_, t) for t in trials]
        finally:
            _measure.shutdown()  # a job still running stops before its folder is removed
    print(render(rows))
    print("\n".join(notes))
    for name, reason in unavailable.items():
        print(f"{name}: unavailable ({reason})")
    if args.json:
        args.json.write_text(json.dumps(dump, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
