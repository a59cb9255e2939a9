"""Byte-level fuzzing of graphkit's verbs on mutated fixtures.

Every outcome must be success or a GraphkitError: any other exception, a hang past the timeout, or a
crash of the process is a failure. Used by tests/test_fuzz.py (a bounded run) and as the long campaign:

    python tests/fuzzing.py --cases 5000 --seed 1 [--timeout 10] [--json]

Each case runs in a worker process limited to a few GB of address space, so a memory blow-up shows as
an error rather than taking the machine down; a worker that crashes is reported with the case it was on.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import graphkit as gk  # noqa: E402

FIXTURES = ROOT / "fixtures"
OPERATIONS = ("load", "check", "inspect", "toposort", "save", "extract", "expose", "split", "run", "compare", "diff")


def fixture_files() -> list[Path]:
    """The fixtures that are fuzzed (every bundled .onnx)."""
    return sorted(FIXTURES.rglob("*.onnx"))


# ------------------------------------------------------------------------------------- mutations


def mutate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Mutate a serialized model: half the time at the byte level, half at the level of its fields."""
    if rng.random() < 0.5:
        return mutate_fields(data, rng)
    return mutate_bytes(data, rng)


def mutate_fields(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Change one to three fields of the parsed model: dims, names, data, attributes, ops, locations."""
    import onnx

    proto = onnx.ModelProto()
    proto.ParseFromString(data)
    graph = proto.graph
    steps = []
    names = [n for node in graph.node for n in [*node.input, *node.output] if n] or ["x"]
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(("dim", "rename", "raw", "attr", "op", "domain", "location", "cycle", "dup", "opset"))
        node = rng.choice(graph.node) if len(graph.node) else None
        if kind == "dim":
            values = [*graph.input, *graph.output, *graph.value_info]
            dims = [d for v in values for d in v.type.tensor_type.shape.dim]
            if dims:
                rng.choice(dims).dim_value = rng.choice((-1, -7, 0, 2**40, 2**62, 3, 1000))
        elif kind == "rename" and node is not None and len(node.input):
            node.input[rng.randrange(len(node.input))] = rng.choice([*names, "ghost", ""])
        elif kind == "raw" and len(graph.initializer):
            tensor = rng.choice(graph.initializer)
            if tensor.HasField("raw_data"):
                tensor.raw_data = tensor.raw_data[: rng.randrange(len(tensor.raw_data) + 1)]
            else:
                tensor.dims.append(rng.choice((0, 5, 2**33)))
        elif kind == "attr" and node is not None and len(node.attribute):
            attr = rng.choice(node.attribute)
            attr.i = rng.choice((-1, 0, 2**31, 7))
            if len(attr.ints):
                attr.ints[rng.randrange(len(attr.ints))] = rng.choice((-3, 0, 2**40))
        elif kind == "op" and node is not None:
            node.op_type = rng.choice(("NoSuchOp", "Add", "Conv", "If", "Loop", "Reshape", ""))
        elif kind == "domain" and node is not None:
            node.domain = rng.choice(("my", "custom", "com.microsoft", "ai.onnx.ml", "x" * 300))
        elif kind == "location":
            tensors = [t for t in graph.initializer if t.external_data]
            if tensors:
                entry = rng.choice(rng.choice(tensors).external_data)
                entry.value = rng.choice(("../../secret", "/etc/passwd", "nothere.data", "-5", "99999999999", "x"))
        elif kind == "cycle" and len(graph.node) > 1:
            first, last = graph.node[0], graph.node[len(graph.node) - 1]
            if len(first.input) and len(last.output):
                first.input[0] = last.output[0]
        elif kind == "dup" and len(graph.node) > 1:
            graph.node[1].output[0] = graph.node[0].output[0]
        elif kind == "opset" and len(proto.opset_import):
            rng.choice(proto.opset_import).version = rng.choice((0, 1, 5, 99, -1))
        steps.append(f"field:{kind}")
    return proto.SerializeToString(), ",".join(steps)


def mutate_bytes(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Apply one to three random byte-level mutations; return the bytes and a description."""
    steps = []
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(("flip", "flip", "byte", "byte", "truncate", "insert", "duplicate", "zero", "varint"))
        if not out:
            out = bytearray(b"\x00")
        pos = rng.randrange(len(out))
        if kind == "flip":
            out[pos] ^= 1 << rng.randrange(8)
        elif kind == "byte":
            out[pos] = rng.randrange(256)
        elif kind == "truncate":
            del out[pos:]
        elif kind == "insert":
            out[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif kind == "duplicate":
            end = min(len(out), pos + rng.randint(1, 64))
            out[pos:pos] = out[pos:end]
        elif kind == "zero":
            end = min(len(out), pos + rng.randint(1, 32))
            out[pos:end] = bytes(end - pos)
        else:  # a large varint where a small number was: dims, lengths, offsets
            out[pos : pos + 1] = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F])
        steps.append(f"{kind}@{pos}")
    return bytes(out), ",".join(steps)


# ------------------------------------------------------------------------------------ operations


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise TimeoutError if the block runs longer than ``seconds``."""

    def fire(signum: int, frame: object) -> None:
        raise TimeoutError(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _operations(path: Path, workdir: Path) -> dict[str, Callable[[], object]]:
    holder: dict[str, gk.Model] = {}

    def model() -> gk.Model:
        if "m" not in holder:
            holder["m"] = gk.load(path)
        return holder["m"]

    def extract() -> object:
        fn = getattr(gk, "extract", None)
        m = model()
        if fn is None or not m.graph.output:
            return None
        inputs = [i.name for i in m.graph.input if i.name not in {t.name for t in m.graph.initializer}]
        return fn(m, inputs=inputs, outputs=[m.graph.output[0].name])

    def split() -> object:
        fn = getattr(gk, "split", None)
        m = model()
        produced = [o for n in m.graph.node for o in n.output if o]
        if fn is None or len(produced) < 2:
            return None
        return fn(m, at=[produced[len(produced) // 2]])

    def save() -> object:
        return gk.save(model(), workdir / "saved.onnx")

    return {
        "load": model,
        "check": lambda: gk.validate(model()),
        "inspect": lambda: gk.summarize(model()),
        "toposort": lambda: gk.toposort(model()),
        "save": save,
        "extract": extract,
        "split": split,
        "run": lambda: gk.run(model(), feed_options=gk.FeedOptions(seed=0)),
        "expose": lambda: gk.expose(model(), all_tensors=True),
        "compare": lambda: gk.compare(model()),
        "diff": lambda: gk.diff(gk.load(path.parent / "original.onnx"), model()),
    }


@dataclass
class Outcome:
    """What one case did: per operation, "ok", the GraphkitError class, or a failure."""

    case: int
    fixture: str
    mutation: str
    results: dict[str, str] = field(default_factory=dict)
    failures: list[dict[str, str]] = field(default_factory=list)


def exercise(case: int, source: Path, data: bytes, mutation: str, *, timeout: float,
             operations: tuple[str, ...] = OPERATIONS) -> Outcome:
    """Write ``data`` beside a copy of the fixture's folder and run every operation on it."""
    outcome = Outcome(case, str(source.relative_to(FIXTURES)), mutation)
    with tempfile.TemporaryDirectory(prefix="graphkit-fuzz-") as tmp:
        work = Path(tmp)
        for sibling in source.parent.iterdir():  # external data travels with the model
            if sibling.is_file() and sibling.suffix != ".onnx":
                shutil.copy(sibling, work / sibling.name)
        target = work / source.name
        target.write_bytes(data)
        shutil.copy(source, work / "original.onnx")
        ops = _operations(target, work)
        for name in operations:
            try:
                with deadline(timeout):
                    ops[name]()
                outcome.results[name] = "ok"
            except gk.GraphkitError as err:
                outcome.results[name] = type(err).__name__
                if name == "load":
                    break  # nothing else can run
            except BaseException as err:  # anything else is the failure we look for
                if isinstance(err, KeyboardInterrupt):
                    raise
                outcome.results[name] = "FAILED"
                outcome.failures.append(
                    {"op": name, "error": f"{type(err).__name__}: {err}"[:500], "traceback": traceback.format_exc()[-3000:]}
                )
                if name == "load":
                    break
    return outcome


# ------------------------------------------------------------------------------------ campaigns


def run_cases(cases: int, seed: int, timeout: float, start: int = 0) -> Iterator[Outcome]:
    """Run ``cases`` mutated cases (deterministic for a seed), in this process."""
    files = fixture_files()
    originals = {p: p.read_bytes() for p in files}
    for case in range(start, start + cases):
        rng = random.Random(f"{seed}:{case}")
        source = files[case % len(files)]
        data, mutation = mutate(originals[source], rng)
        print(f"case {case} {source.name} {mutation}", file=sys.stderr, flush=True)
        yield exercise(case, source, data, mutation, timeout=timeout)


def worker(cases: int, seed: int, timeout: float, start: int, memory_gb: float) -> int:
    """Run cases in this process with a memory limit, printing one JSON line per case."""
    limit = int(memory_gb * 2**30)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    for outcome in run_cases(cases, seed, timeout, start):
        print(json.dumps(asdict(outcome)), flush=True)
    return 0


@dataclass
class CampaignSummary:
    """Figures of a campaign."""

    cases: int = 0
    seconds: float = 0.0
    operations_ok: int = 0
    graphkit_errors: int = 0
    failures: list[dict[str, object]] = field(default_factory=list)
    crashes: list[dict[str, object]] = field(default_factory=list)
    outcomes_by_op: dict[str, dict[str, int]] = field(default_factory=dict)


def campaign(cases: int, seed: int = 0, timeout: float = 10.0, memory_gb: float = 6.0) -> CampaignSummary:
    """Run ``cases`` cases in worker processes, restarting after a crash; summarize."""
    summary = CampaignSummary()
    started = time.perf_counter()
    next_case = 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    while next_case < cases:
        cmd = [sys.executable, __file__, "--worker", "--cases", str(cases - next_case), "--start", str(next_case),
               "--seed", str(seed), "--timeout", str(timeout), "--memory-gb", str(memory_gb)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                              timeout=min(timeout * len(OPERATIONS) * (cases - next_case) + 120, 86_400))
        done = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        for item in done:
            _count(summary, item)
        next_case += len(done)
        if proc.returncode != 0:  # the worker died on the next case
            last = [ln for ln in proc.stderr.splitlines() if ln.startswith("case ")]
            summary.crashes.append({"case": next_case, "returncode": proc.returncode,
                                    "last": last[-1] if last else "", "stderr": proc.stderr[-2000:]})
            summary.cases += 1
            next_case += 1
    summary.seconds = round(time.perf_counter() - started, 1)
    return summary


def _count(summary: CampaignSummary, item: dict[str, object]) -> None:
    summary.cases += 1
    for op, result in item["results"].items():  # type: ignore[union-attr]
        summary.outcomes_by_op.setdefault(op, {}).setdefault(result, 0)
        summary.outcomes_by_op[op][result] += 1
        if result == "ok":
            summary.operations_ok += 1
        elif result != "FAILED":
            summary.graphkit_errors += 1
    for failure in item["failures"]:  # type: ignore[union-attr]
        summary.failures.append({"case": item["case"], "fixture": item["fixture"], "mutation": item["mutation"],
                                 **failure})


def main() -> int:
    parser = argparse.ArgumentParser(description="fuzz graphkit's verbs with mutated fixtures")
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per operation before it is a hang")
    parser.add_argument("--memory-gb", type=float, default=6.0)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args()
    if args.worker:
        return worker(args.cases, args.seed, args.timeout, args.start, args.memory_gb)
    summary = campaign(args.cases, args.seed, args.timeout, args.memory_gb)
    if args.json:
        print(json.dumps(asdict(summary), indent=2))
    else:
        print(f"{summary.cases} cases in {summary.seconds} s: {summary.operations_ok} operations succeeded, "
              f"{summary.graphkit_errors} ended in a graphkit error, {len(summary.failures)} failures, "
              f"{len(summary.crashes)} crashes")
        for op, counts in summary.outcomes_by_op.items():
            print(f"  {op:<9} " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
        for failure in summary.failures[:20]:
            print(f"FAILURE case {failure['case']} {failure['fixture']} {failure['mutation']} {failure['op']}: "
                  f"{failure['error']}")
        for crash in summary.crashes[:20]:
            print(f"CRASH {crash}")
    return 1 if summary.failures or summary.crashes else 0


if __name__ == "__main__":
    raise SystemExit(main())
