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
from typing import Any

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


# ====================================================================================================
# Hostile inputs of five more kinds: command lines, recipes, split manifests, feed files, API arguments
# (and model bytes again, through the same runner). Each case gets a fresh workspace (copies of the
# fixtures, feed files, a recipe, split folders, FIFOs, directories and device nodes with model-like
# names); every file in it is hashed before and after. A case fails on a traceback (a non-graphkit
# exception, CLI exit 3 or any code but 0/1/2), a hang past the timeout, an input changed (content, or
# a FIFO/device/directory replaced), or a file left behind: any new file after a failed command, or a
# temp-looking one after a successful command.
# ====================================================================================================

KINDS = ("models", "cli", "recipes", "manifests", "feeds", "api")
BIG_FILE = 64 << 20  # files over this size are compared by size and mtime, not hashed
SPECIAL_SUFFIXES = ("", ".onnx", ".npy", ".npz", ".pb", ".yaml", ".json")
TEMPLATE_MODELS = {"whole": "whole_model.onnx", "add": "my_add.onnx", "static": "model_static.onnx",
                   "linear": "linear_func.onnx", "ifo": "if_outer_scope.onnx", "markers": "debug_markers.onnx",
                   "ext": "ext_weights/model.onnx"}
NUMBERS = ("²", "٣", "１", "𝟗", "9" * 30, "-" + "9" * 30, "nan", "inf", "-inf", "1e400", "-1", "0", "1e-400",
           "2147483648", "9223372036854775808", "100000", "0x10", " 3", "", "\x00", "1_0", "+5", "3.5", "-0",
           "1e9", "NaN", "∞", "3\x00")
NAMES = ("ghost", "x" * 300, "y" * 100_000, "a\x00b", "\udcff", "", " ", "../../etc/passwd", "名前", "=", ":",
         "a=b=c", "::", "-x", "a.b.c")
VALUES = ("1", "[1,1]", '"s"', "1e400", "nan", "[" * 50_000, '{"a":', "¹", "null", "[[1,2],[3]]",
          "{fifo.npy}", "{zero.npy}", "{dir.npy}", "{missing.npy}", "{bias.npy}", "{in.npy}", "1" * 5000)


#: A span of whole_model (its input and output tensors) and, in the workspace, in/span.onnx: that span
#: extracted, for ``edit --replace-span`` round trips.
SPAN = ("/convs1/convs1.2/Conv_output_0", "/convs4/convs4.0/Conv_output_0")
#: The folder (in the workspace's in/) of the exporter-style model, named as users' folders are.
EXPORTED_DIR = "my models/exporté"


class _Hang(BaseException):
    """Raised by the alarm; a BaseException so that the CLI's ``except Exception`` does not report it."""


#: System calls in which a thread waits for someone else (a FIFO's writer, a pipe, a timer): read, write,
#: open, poll, select, pause, nanosleep, wait4, openat, pselect6, ppoll, clock_nanosleep (x86-64 numbers).
_WAITING_CALLS = {0, 1, 2, 7, 23, 34, 35, 61, 257, 270, 271, 230}


def _thread_waits(native_id: int) -> bool:
    """Whether a thread of this process sleeps in a system call that waits for another party."""
    try:
        state = Path(f"/proc/self/task/{native_id}/stat").read_text().rpartition(")")[2].split()[0]
        call = Path(f"/proc/self/task/{native_id}/syscall").read_text().split()[0]
    except (OSError, IndexError):
        return False
    return state in ("S", "D") and call.isdigit() and int(call) in _WAITING_CALLS


@contextlib.contextmanager
def _alarm(seconds: float, wall_cap: float = 12.0) -> Iterator[None]:
    """Raise _Hang in this (the main) thread when the block hangs: it has used ``seconds`` of CPU, or it
    has waited in a blocking system call (a FIFO's open, say) for ``seconds``, or ``wall_cap`` times
    ``seconds`` have passed. Slowness that only comes from a busy machine (nice 19 among other jobs)
    is not a hang; the CPU clock and the waiting state tell the two apart.

    The signal is sent to this thread by a watcher thread: a process-wide alarm may be delivered to any
    thread (ONNX Runtime's pools, for one), which leaves a blocked open() of a FIFO blocked.
    """
    import threading

    done = threading.Event()

    def fire(signum: int, frame: object) -> None:
        if not done.is_set():
            raise _Hang(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    target = threading.get_ident()
    native = threading.get_native_id()

    def watch() -> None:
        started, cpu = time.monotonic(), time.process_time()
        waited = 0.0
        while not done.wait(0.5):
            waited = waited + 0.5 if _thread_waits(native) else 0.0
            wall = time.monotonic() - started
            if time.process_time() - cpu > seconds or waited > seconds or wall > seconds * wall_cap:
                break
        while not done.is_set():  # again every second: a bare ``except:`` somewhere may swallow one
            signal.pthread_kill(target, signal.SIGALRM)
            if done.wait(1.0):
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        signal.signal(signal.SIGALRM, previous)


# ------------------------------------------------------------------------------------ workspaces


@dataclass
class ModelInfo:
    """Names in one template model, for building plausible arguments."""

    path: str  # relative to the workspace
    inputs: list[str]
    outputs: list[str]
    inner: list[str]
    nodes: list[str]
    inits: list[str]
    attrs: list[tuple[str, str]]
    ops: list[str]
    constants: list[str]


@dataclass
class Template:
    """The files every workspace starts from (built once per worker process)."""

    root: Path
    info: dict[str, ModelInfo]


_TEMPLATE: Template | None = None


def _preload() -> None:
    """Import every verb and heavy dependency now: an alarm during an import can leave it half done."""
    import yaml

    import graphkit._edit
    import graphkit._run
    from graphkit.cli import VERBS, build_parser

    build_parser()
    for verb in VERBS:
        verb_flags(verb)
    yaml.safe_load("[]")
    with contextlib.suppress(Exception):
        graphkit.to_graphsurgeon(gk.load(FIXTURES / "my_add.onnx"))


_FLAGS: dict[str, frozenset[str]] = {}


def verb_flags(verb: str) -> frozenset[str]:
    """The option strings ``verb`` accepts in this checkout: a flag is fuzzed once it has landed."""
    if verb not in _FLAGS:
        from graphkit.cli import build_parser

        parser = build_parser([verb])
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        _FLAGS[verb] = frozenset(sub.choices[verb]._option_string_actions)
    return _FLAGS[verb]


def custom_ops_library() -> str:
    """onnxruntime-extensions' operator library (the custom-ops extra), or a file that is not one."""
    try:
        import onnxruntime_extensions
    except ImportError:
        return str(FIXTURES / "my_add.onnx")
    return str(onnxruntime_extensions.get_library_path())


def _cache_dir() -> Path:
    folder = Path(os.environ.get("GRAPHKIT_FUZZ_CACHE", Path(tempfile.gettempdir()) / "graphkit-fuzz-cache"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def zip_bomb(gib: int = 6) -> Path:
    """An .npz (cached) whose one member, ``in.npy``, inflates to ``gib`` GiB of float32 zeros.

    Written by hand in seconds: one compressed 64 MiB block of zeros, flushed so that it stands alone,
    repeated, in a zip64 entry (zipfile would compress all 6 GiB).
    """
    import struct
    import zlib

    path = _cache_dir() / f"bomb-{gib}g.npz"
    if path.exists():
        return path
    count = gib * 2**30 // 4
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({count},), }}".encode("latin1")
    header += b" " * (63 - (len(header) + 10) % 64) + b"\n"
    head = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header
    chunk = bytes(64 << 20)
    repeats = count * 4 // len(chunk)
    first = zlib.compressobj(9, zlib.DEFLATED, -15)
    start = first.compress(head) + first.flush(zlib.Z_FULL_FLUSH)
    block = zlib.compressobj(9, zlib.DEFLATED, -15)
    segment = block.compress(chunk) + block.flush(zlib.Z_FULL_FLUSH)
    end = zlib.compressobj(9, zlib.DEFLATED, -15).flush()
    crc = zlib.crc32(head)
    for _ in range(repeats):
        crc = zlib.crc32(chunk, crc)
    size = len(head) + repeats * len(chunk)
    packed = len(start) + repeats * len(segment) + len(end)
    name = b"in.npy"
    zip64 = struct.pack("<HHQQ", 1, 16, size, packed)
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 8, 0, 0x21, crc, 0xFFFFFFFF, 0xFFFFFFFF, len(name),
                        len(zip64)) + name + zip64
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 8, 0, 0x21, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                          len(name), len(zip64), 0, 0, 0, 0, 0) + name + zip64
    offset = len(local) + packed
    tail = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), offset, 0)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    with open(tmp, "wb") as out:
        out.write(local + start)
        for _ in range(repeats):
            out.write(segment)
        out.write(end + central + tail)
    os.replace(tmp, path)
    return path


def _model_info(path: Path, rel: str) -> ModelInfo:
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    g = proto.graph
    inits = [t.name for t in g.initializer]
    produced = [o for n in g.node for o in n.output if o]
    return ModelInfo(
        rel, [i.name for i in g.input if i.name not in inits], [o.name for o in g.output],
        [o for o in produced if o not in {x.name for x in g.output}] or produced,
        [n.name for n in g.node if n.name], inits,
        [(n.name, a.name) for n in g.node if n.name for a in n.attribute] or [("ghost", "alpha")],
        sorted({n.op_type for n in g.node}), [n.output[0] for n in g.node if n.op_type == "Constant"] or ["ghost"],
    )


def template() -> Template:
    """Build (once per process) the workspace template: models, feeds, a recipe, a map, two split folders."""
    global _TEMPLATE
    if _TEMPLATE is not None:
        return _TEMPLATE
    import atexit

    import numpy as np
    import onnx
    from onnx import numpy_helper

    _preload()
    root = Path(tempfile.mkdtemp(prefix="graphkit-fuzz-template-", dir=_scratch()))
    atexit.register(shutil.rmtree, root, True)
    inside = root / "in"
    (inside / "ext").mkdir(parents=True)
    (root / "out").mkdir()
    info = {}
    for key, name in TEMPLATE_MODELS.items():
        target = inside / name.replace("ext_weights/", "ext/")
        shutil.copy(FIXTURES / name, target)
        info[key] = _model_info(target, str(target.relative_to(root)))
    shutil.copy(FIXTURES / "ext_weights" / "model.data", inside / "ext" / "model.data")
    rng = np.random.default_rng(0)
    value = rng.standard_normal((1, 3, 10, 10)).astype(np.float32)
    np.save(inside / "in.npy", value)
    np.savez(inside / "add.npz", a=value, b=value)
    (inside / "in.pb").write_bytes(numpy_helper.from_array(value, "in").SerializeToString())
    whole = gk.load(inside / "whole_model.onnx")
    bias = next(t for t in whole.graph.initializer if t.name == "convs1.0.bias")
    np.save(inside / "bias.npy", np.ones(list(bias.dims), np.float32))
    np.savez(inside / "ref.npz", output=np.zeros((1, 3, 4, 4), np.float32))
    (inside / "recipe.yaml").write_text("- op: rename_node\n  old: /Add\n  new: add_renamed\n")
    (inside / "map.json").write_text('{"output": "output"}')
    gk.write_split(gk.split(whole, parts=3), inside / "split")
    gk.write_split(gk.split(gk.load(inside / "ext" / "model.onnx"), parts=2), inside / "split_ext")
    shutil.copy(inside / "linear_func.onnx", root / "outside.onnx")
    shutil.copy(ROOT / "examples" / "python_ops.py", inside / "python_ops.py")
    gk.save(gk.extract(whole, inputs=[SPAN[0]], outputs=[SPAN[1]]), inside / "span.onnx")
    exported = inside / EXPORTED_DIR / "model.onnx"
    exported.parent.mkdir(parents=True)
    exporter_model(exported)
    info["exported"] = _model_info(exported, str(exported.relative_to(root)))
    zip_bomb()
    onnx.checker.check_model(str(inside / "whole_model.onnx"))
    _TEMPLATE = Template(root, info)
    return _TEMPLATE


def exporter_model(path: Path) -> None:
    """A model built the way exporters build them, written to ``path`` with its weights in two files.

    torch-style names (``/encoder/layer.0/attn/MatMul``, ``onnx::MatMul_7``), Constant nodes and the
    ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` chain of dynamic axes (``batch_size``,
    ``sequence_length``), a local function in its own domain, an If reading an outer-scope tensor, a Loop,
    an ONNX Runtime contrib operator, and tensor names with a colon, a comma, a space and non-ASCII letters.
    """
    import numpy as np
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    width, vocab = 8, 11
    nodes: list[onnx.NodeProto] = []
    weights: dict[str, np.ndarray] = {}

    def node(op: str, inputs: list[str], output: str, name: str, domain: str = "", **attrs: Any) -> str:
        nodes.append(h.make_node(op, inputs, [output], name=name, domain=domain, **attrs))
        return output

    def const(output: str, value: object) -> str:
        nodes.append(h.make_node("Constant", [], [output], value=nh.from_array(np.asarray(value), output)))
        return output

    def scalar(name: str, value: float) -> onnx.NodeProto:
        return h.make_node("Constant", [], [name], value=nh.from_array(np.array(value, np.float32), name))

    weights["embeddings.weight"] = rng.standard_normal((vocab, width)).astype(np.float32)
    x = node("Gather", ["embeddings.weight", "input_ids"], "/embeddings/Gather_output_0", "/embeddings/Gather")
    p = "/encoder/layer.0/attn"
    shape = node("Shape", [x], f"{p}/Shape_output_0", f"{p}/Shape")
    dims = []
    for k in range(2):
        dim = node("Gather", [shape, const(f"{p}/Constant_{k}_output_0", np.array(k, np.int64))],
                   f"{p}/Gather_{k}_output_0", f"{p}/Gather_{k}", axis=0)
        dims.append(node("Unsqueeze", [dim, const(f"{p}/Constant_axes_{k}_output_0", np.array([0], np.int64))],
                         f"{p}/Unsqueeze_{k}_output_0", f"{p}/Unsqueeze_{k}"))
    target = node("Concat", [*dims, const(f"{p}/Constant_heads_output_0", np.array([2, width // 2], np.int64))],
                  f"{p}/Concat_output_0", f"{p}/Concat", axis=0)
    weights["onnx::MatMul_7"] = (rng.standard_normal((width, width)) * 0.3).astype(np.float32)
    y = node("MatMul", [x, "onnx::MatMul_7"], f"{p}/MatMul_output_0", f"{p}/MatMul")
    y = node("Reshape", [y, target], f"{p}/Reshape_output_0", f"{p}/Reshape")
    y = node("Softmax", [y], f"{p}/Softmax_output_0", f"{p}/Softmax", axis=-1)
    y = node("Reshape", [y, const(f"{p}/Constant_flat_output_0", np.array([0, 0, width], np.int64))],
             f"{p}/Reshape_1_output_0", f"{p}/Reshape_1")
    x = node("Add", [x, y], "/encoder/layer.0/Add_output_0", "/encoder/layer.0/Add")
    x = node("Gelu", [x], "/encoder/layer.0/mlp/gelu_output_0", "/encoder/layer.0/mlp/Gelu", domain="pkg.custom")
    odd = node("Identity", [x], "emb:0,größe ü", "/odd/Identity:0,ü")
    total = node("ReduceSum", [odd], "/pool/ReduceSum_output_0", "/pool/ReduceSum", keepdims=0)
    positive = node("Greater", [total, const("/pool/Constant_output_0", np.array(0.0, np.float32))],
                    "/pool/Greater_output_0", "/pool/Greater")
    branch = [h.make_graph([h.make_node(op, [odd], [f"{op}_out"], name=f"/pool/If/{op}")], op.lower(), [],
                           [h.make_tensor_value_info(f"{op}_out", T.FLOAT, None)]) for op in ("Relu", "Neg")]
    x = node("If", [positive], "/pool/If_output_0", "/pool/If", then_branch=branch[0], else_branch=branch[1])
    body = h.make_graph(
        [scalar("half", 0.5), h.make_node("Mul", ["y_in", "half"], ["y_half"], name="/loop/body/Mul"),
         h.make_node("Add", ["y_half", x], ["y_out"], name="/loop/body/Add"),
         h.make_node("Identity", ["cond_in"], ["cond_out"], name="/loop/body/Identity")],
        "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
                 h.make_tensor_value_info("y_in", T.FLOAT, None)],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("y_out", T.FLOAT, None)])
    x = node("Loop", [const("/loop/Constant_output_0", np.array(2, np.int64)),
                      const("/loop/Constant_1_output_0", np.array(True)), x], "/loop/Loop_output_0", "/loop/Loop",
             body=body)
    weights["classifier.weight"] = rng.standard_normal((width, vocab)).astype(np.float32)
    node("FusedMatMul", [x, "classifier.weight"], "logits", "/classifier/FusedMatMul", domain="com.microsoft")
    node("Relu", [odd], "odd out/ä:1", "/odd/Relu wéird")
    gelu = h.make_function("pkg.custom", "Gelu", ["X"], ["Y"], [
        scalar("s2", float(np.sqrt(2.0))), h.make_node("Div", ["X", "s2"], ["xd"]), h.make_node("Erf", ["xd"], ["e"]),
        scalar("one", 1.0), h.make_node("Add", ["e", "one"], ["e1"]), h.make_node("Mul", ["X", "e1"], ["xe"]),
        scalar("hf", 0.5), h.make_node("Mul", ["xe", "hf"], ["Y"])], [h.make_opsetid("", 17)])
    graph = h.make_graph(
        nodes, "main_graph", [h.make_tensor_value_info("input_ids", T.INT64, ["batch_size", "sequence_length"])],
        [h.make_tensor_value_info("logits", T.FLOAT, ["batch_size", "sequence_length", vocab]),
         h.make_tensor_value_info("odd out/ä:1", T.FLOAT, ["batch_size", "sequence_length", width])])
    for name, value in weights.items():  # the embeddings in one file, the other weights in another
        location = "embeddings.bin" if name.startswith("embeddings") else "weights.bin"
        data = path.parent / location
        offset = data.stat().st_size if data.exists() else 0
        with open(data, "ab") as out:
            out.write(value.tobytes())
        entry = onnx.TensorProto(name=name, data_type=T.FLOAT, dims=value.shape, data_location=T.EXTERNAL)
        for key, text in (("location", location), ("offset", str(offset)), ("length", str(value.nbytes))):
            entry.external_data.add(key=key, value=text)
        graph.initializer.append(entry)
    model = h.make_model(graph, functions=[gelu], ir_version=8, producer_name="pytorch", producer_version="2.3.0",
                         opset_imports=[h.make_opsetid("", 17), h.make_opsetid("pkg.custom", 1),
                                        h.make_opsetid("com.microsoft", 1)])
    path.write_bytes(model.SerializeToString())
    onnx.checker.check_model(str(path), full_check=True)


@dataclass
class Workspace:
    """One case's folder: ``in/`` (inputs), ``out/`` (outputs), ``special/`` (FIFOs, devices, ...)."""

    root: Path
    info: dict[str, ModelInfo]

    @property
    def inside(self) -> Path:
        return self.root / "in"

    @property
    def out(self) -> Path:
        return self.root / "out"

    @property
    def special(self) -> Path:
        return self.root / "special"

    def model(self, key: str) -> Path:
        return self.root / self.info[key].path

    def text(self, value: object) -> str:
        """``value`` with the workspace path written as $W, for one-line reproductions."""
        return str(value).replace(str(self.root), "$W")

    def hostile_input(self, rng: random.Random, suffix: str = ".onnx") -> str:
        """A path that is not a regular readable file of the expected kind (or is one, but not a model)."""
        sp = self.special
        return str(rng.choice([
            sp / f"fifo{suffix}", sp / f"dir{suffix}", sp / f"zero{suffix}", sp / f"null{suffix}", sp / "sock",
            sp / "loop", sp / f"missing{suffix}", sp / "nodir" / f"x{suffix}", sp / ("a" * 300 + suffix),
            "a\x00b" + suffix, "", sp / "data_link", self.inside / "ext" / "model.data", "/dev/urandom",
            self.inside / "recipe.yaml", self.inside / "in.npy", self.root / "outside.onnx",
        ]))

    def hostile_output(self, rng: random.Random, suffix: str = ".onnx") -> str:
        """An output path that is not a fresh regular file in an existing folder, or that names an input."""
        sp = self.special
        inputs = [p for p in self.inside.rglob("*") if p.is_file()]
        return str(rng.choice([
            sp / f"fifo{suffix}", sp / f"dir{suffix}", sp / f"null{suffix}", sp / "sock", sp / "loop",
            sp / "nodir" / f"x{suffix}", sp / ("a" * 300 + suffix), self.out / ("b" * 245 + suffix),
            "a\x00b" + suffix, "", self.out, sp / "data_link", self.out / "x.data", self.out / "x.onnx.tmp",
            rng.choice(inputs), rng.choice(inputs), self.inside / "ext" / "model.data",
            self.inside / "ext" / "model.onnx",
        ]))


def _scratch() -> str | None:
    """Where workspaces go: memory (/dev/shm) when there is one; a disk's rmdir costs milliseconds."""
    chosen = os.environ.get("GRAPHKIT_FUZZ_TMP")
    if chosen:
        return chosen
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def _make_specials(folder: Path) -> None:
    import socket
    import stat

    folder.mkdir()
    for suffix in SPECIAL_SUFFIXES:
        os.mkfifo(folder / f"fifo{suffix}")
        (folder / f"dir{suffix}").mkdir()
        for name, minor in (("null", 3), ("zero", 5)):
            with contextlib.suppress(OSError):  # needs root; without it those cases see missing files
                os.mknod(folder / f"{name}{suffix}", stat.S_IFCHR | 0o666, os.makedev(1, minor))
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(folder / "sock"))
    os.symlink("loop", folder / "loop")
    os.symlink("../in/ext/model.data", folder / "data_link")


def _snapshot(root: Path) -> dict[str, tuple[str, str]]:
    """Relative path → (kind, digest) of everything below ``root`` (symlinks not followed)."""
    import hashlib
    import stat

    found: dict[str, tuple[str, str]] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(root))
            info = path.lstat()
            if stat.S_ISREG(info.st_mode):
                if info.st_size > BIG_FILE:
                    found[rel] = ("file", f"{info.st_size}:{info.st_mtime_ns}")
                else:
                    found[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
            elif stat.S_ISDIR(info.st_mode):
                found[rel] = ("dir", "")
            elif stat.S_ISLNK(info.st_mode):
                found[rel] = ("link", os.readlink(path))
            else:
                found[rel] = ("special", str(stat.S_IFMT(info.st_mode)))
    return found


# --------------------------------------------------------------------------------------- actions


@dataclass
class Action:
    """What one case runs: a command line (returns its exit code) or an API call."""

    what: str
    call: Callable[[], object]
    cli: bool
    exempt: tuple[str, ...] = ()  # inputs the action may replace (--overwrite of its own output)
    outputs: tuple[str, ...] = ()  # paths the action may write (files, or folders and all below them)
    reads: tuple[str, ...] | None = None  # what it reads (None: everything but out/); never to be replaced
    models: tuple[gk.Model, ...] = ()  # in-memory inputs that must stay unchanged


def _cli_action(ws: Workspace, argv: list[str], outputs: list[str] | None = None,
                reads: list[str] | None = None) -> Action:
    """A command line; ``outputs`` default to the arguments inside out/, ``reads`` to everything else."""
    from graphkit.cli import main as cli_main

    def absolute(text: str) -> str | None:
        return os.path.abspath(text) if text and "\x00" not in text else None

    if outputs is None:
        outputs = [a for a in argv if (absolute(a) or "").startswith(str(ws.out) + os.sep)]
    named = tuple(p for p in (absolute(o) for o in outputs) if p)
    exempt: list[str] = []
    if "--overwrite" in argv:  # the output model's own previous files may be replaced
        for out in named:
            if out.endswith(".onnx"):
                exempt += [out, os.path.splitext(out)[0] + ".data"]
    read = None if reads is None else tuple(p for p in (absolute(r) for r in reads) if p)
    return Action("graphkit " + " ".join(_quote(ws.text(a)) for a in argv), lambda: cli_main(argv), True,
                  tuple(exempt), named, read)


def _quote(arg: str) -> str:
    import shlex

    if len(arg) > 120:
        return f"<{len(arg)} chars: {arg[:20]!r}...>"
    return shlex.quote(arg) if arg.isprintable() else repr(arg)


# -------------------------------------------------------------------------------- command lines


def _pick(rng: random.Random, items: list[str] | tuple[str, ...], fallback: str = "ghost") -> str:
    return rng.choice(list(items)) if items else fallback


def _cli_case(ws: Workspace, rng: random.Random) -> Action:
    """A command line for a random verb, with one to three hostile values or paths. Flags that this
    checkout's parser does not know yet are left out, so the harness follows what has landed."""
    from graphkit.cli import VERBS

    verb = rng.choice(list(VERBS))
    key = rng.choice(["whole", "add", "static", "ifo", "ext", "linear", "exported"])
    info = ws.info[key]
    model = str(ws.model(key))
    # argv items: (text, role); roles: lit, in, out, num, name, value
    items: list[tuple[str, str]] = [(verb, "lit")]
    inner, inp, outp = _pick(rng, info.inner), _pick(rng, info.inputs), _pick(rng, info.outputs)
    feeds = _feed_flags(ws, info, rng)
    if verb == "check":
        items += [(model, "in")] + [(f, "lit") for f in rng.sample(["--json", "--strict", "--no-checker"], 1)]
    elif verb == "inspect":
        items += [(model, "in")]
        extra: dict[str, list[tuple[str, str]]] = {
            "--json": [], "--nodes": [], "--tensors": [], "--stats": [], "--all": [],
            "--op": [(_pick(rng, info.ops), "name")], "--name": [(rng.choice(["*Conv*", "/convs1/*", "*"]), "name")],
            "--shape": feeds["--shape"], "--dim": feeds["--dim"]}
        items += _extras(verb, extra, rng, 0, 3)
    elif verb == "toposort":
        items += [(model, "in"), (str(ws.out / "sorted.onnx"), "out")]
    elif verb == "extract":
        if rng.random() < 0.2:  # a boundary typed by hand, NAME:DTYPE:[DIMS]
            inp = f"{inner}:" + rng.choice(["float32:[1,3,10,10]", "int64:[batch_size,sequence_length]",
                                            "float16:[]", "bogus:[1]", "float32:[-1]", "float32"])
        items += [(model, "in"), (str(ws.out / "cut.onnx"), "out"), ("--inputs", "lit"), (inp, "name"),
                  ("--outputs", "lit"), (rng.choice([outp, inner]), "name")]
        items += _extras(verb, {"--json": [], "--no-observe": [], "--allow-noop": [],
                                **_custom_flags(ws)}, rng, 0, 2)
    elif verb == "expose":
        items += [(model, "in"), (str(ws.out / "exposed.onnx"), "out")]
        items += rng.choice([[("--tensors", "lit"), (inner, "name")], [("--all", "lit")],
                             [("--op-types", "lit"), (_pick(rng, info.ops), "name")]])
        items += _extras(verb, {"--json": [], "--no-observe": [], "--allow-noop": []}, rng, 0, 2)
    elif verb == "split":
        items += [(model, "in"), (str(ws.out / "split"), "out")]
        items += rng.choice([[("--parts", "lit"), ("2", "num")], [("--at", "lit"), (inner, "name")]])
        items += _extras(verb, {"--balance": [(rng.choice(["nodes", "weights"]), "name")], "--json": [],
                                **_progress_flags(rng), **_custom_flags(ws)}, rng, 0, 2)
    elif verb in ("run", "compare"):
        items += [(model, "in")]
        if verb == "compare" and rng.random() < 0.3:
            items += [(str(ws.model(key)), "in")]
        extra = {k: feeds[k] for k in ("--input", "--shape", "--dim", "--range", "--seed", "--value")}
        extra.update(_runtime_flags(ws, rng))
        if verb == "run":
            extra.update({"--threads": [("2", "num")], "--output": [(inner, "name")],
                          "--save": [(str(ws.out / "values.npz"), "out")], "--opt-level": [("basic", "lit")],
                          "--check-finite": [], "--json": []})
        else:
            extra.update({
                "--atol": [("1e-3", "num")], "--rtol": [("1e-3", "num")], "--tensor": [(inner, "name")],
                "--map": [(str(ws.inside / "map.json"), "in")], "--fragment-mb": [("1", "num")],
                "--local-checks": [("4", "num")], "--save-report": [(str(ws.out / "report.json"), "out")],
                "--reference": [(str(ws.inside / "ref.npz"), "in")], "--check-finite": [],
                "--save-repro": [(str(ws.out / "repro"), "out")], "--html": [(str(ws.out / "report.html"), "out")],
                "--backend": [(rng.choice(["reference", "ort-noopt"]), "lit")],
                "--candidate-backend": [(rng.choice(["reference", "ort"]), "lit")],
                "--reference-provider": [(rng.choice(["cpu", "cuda", "bogus"]), "name")],
                "--candidate-provider": [(rng.choice(["cpu", "tensorrt"]), "name")],
                "--all": [], "--constants": [], "--json": [], **_progress_flags(rng),
                "--marker-domain": [(rng.choice(["my", "pkg.custom", ""]), "name")],
                "--marker-op": [(rng.choice(["Debug", "Gelu", "Identity"]), "name")],
                "--marker-attr": [(rng.choice(["name", "ghost"]), "name")]})
        items += _extras(verb, extra, rng, 0, 4)
    elif verb == "run-chain":
        items += [(str(ws.inside / rng.choice(["split", "split_ext"])), "in")]
        extra = {"--save": [(str(ws.out / "chain.npz"), "out")], "--atol": [("1e-4", "num")],
                 "--rtol": [("1e-4", "num")], "--threads": [("1", "num")], "--seed": [("1", "num")],
                 "--dim": [("batch=2", "num")], "--source": [(model, "in")], "--no-compare": [],
                 "--opt-level": [(rng.choice(["disable", "basic", "extended", "all"]), "name")], "--json": [],
                 **{k: feeds[k] for k in ("--input", "--shape", "--range", "--value")},
                 **_progress_flags(rng), **_runtime_flags(ws, rng)}
        items += _extras(verb, extra, rng, 0, 3)
    elif verb == "edit":
        items += [(model, "in"), (str(ws.out / "edited.onnx"), "out")]
        for _ in range(rng.randint(1, 2)):
            items += _edit_flag(ws, key, info, rng)
        if rng.random() < 0.3:
            items += [("--save-recipe", "lit"), (str(ws.out / rng.choice(["r.yaml", "r.json"])), "out")]
        if rng.random() < 0.2:
            items += [("--recipe", "lit"), (str(ws.inside / "recipe.yaml"), "in")]
        items += _extras(verb, {"--allow-noop": [], "--allow-reshape": [], "--json": []}, rng, 0, 1)
    elif verb == "merge":
        if rng.random() < 0.5 or "--share-inputs" not in verb_flags(verb):
            items += [(str(ws.model("add")), "in"), (str(ws.model("static")), "in"),
                      (str(ws.out / "merged.onnx"), "out"), ("--connect", "lit"), ("output=in", "name")]
        else:  # side by side: inputs of the same name and type shared, or kept apart
            a, b = rng.choice([("whole", "whole"), ("add", "static"), ("static", "static"), ("whole", "ext"),
                               ("linear", "add")])
            items += [(str(ws.model(a)), "in"), (str(ws.model(b)), "in"), (str(ws.out / "merged.onnx"), "out")]
            items += _extras(verb, {"--share-inputs": [], "--no-share-inputs": [], "--json": [],
                                    "--outputs": [(_pick(rng, ws.info[a].outputs), "name")]}, rng, 0, 1)
        if rng.random() < 0.3:
            items += [("--prefixes", "lit"), ("a_", "name"), ("b_", "name")]
    elif verb == "markers":
        items += [(str(ws.model("markers")), "in"), (str(ws.out / "marked.onnx"), "out")]
        for flag, default in rng.sample([("--domain", "my"), ("--op", "Debug"), ("--attr", "name")], rng.randint(0, 2)):
            items += [(flag, "lit"), (default, "name")]
        items += _extras(verb, {"--no-expose": [], "--json": []}, rng, 0, 2)
    elif verb == "infer-shapes":
        items += [(model, "in"), (str(ws.out / "typed.onnx"), "out")]
        items += _extras(verb, {"--json": [], "--no-observe": []}, rng, 0, 2)
    elif verb == "simplify":
        items += [(model, "in"), (str(ws.out / "simple.onnx"), "out")]
        extra = {"--json": [], "--no-verify": [], "--max-bytes": [("1024", "num")],
                 "--skip": [(rng.choice(["constants", "identities", "shapes", "fold", "merge", "dead"]), "name")],
                 "--atol": [("1e-4", "num")], "--rtol": [("1e-3", "num")], **_progress_flags(rng), **feeds}
        items += _extras(verb, extra, rng, 0, 3)
    elif verb == "convert":
        items += [(model, "in"), (str(ws.out / "converted.onnx"), "out")]
        modes = [["--float16"], ["--float16", "--keep-io-types"], ["--float16", "--auto-mixed"], ["--opset"], []]
        mode = [f for f in rng.choice(modes) if f in verb_flags(verb)]
        for flag in mode:
            items += [(flag, "lit")] + ([(rng.choice(["7", "11", "13", "17", "18", "21"]), "num")]
                                         if flag == "--opset" else [])
        extra = {"--keep-op": [(_pick(rng, info.ops), "name")], "--keep-node": [(_pick(rng, info.nodes), "name")],
                 "--json": [], "--atol": [("1e-2", "num")], "--rtol": [("1e-2", "num")],
                 "--input": feeds["--input"], "--seed": feeds["--seed"], "--dim": feeds["--dim"],
                 "--shape": feeds["--shape"], "--range": feeds["--range"], "--value": feeds["--value"],
                 "--save-recipe": [(str(ws.out / rng.choice(["mixed.yaml", "mixed.json"])), "out")],
                 **_progress_flags(rng)}
        items += _extras(verb, extra, rng, 0, 2)
    elif verb == "reduce":
        items += [(model, "in"), (str(ws.out / "reduced"), "out")]
        extra = {"--fails-on": [(rng.choice(["load", "run", "compare"]), "name")], **feeds,
                 "--candidate": [(str(ws.model(rng.choice(list(ws.info)))), "in")],
                 "--backend": [(rng.choice(["ort", "ort-noopt", "reference"]), "name")],
                 "--candidate-backend": [(rng.choice(["ort", "reference"]), "name")],
                 "--atol": [("1e-4", "num")], "--rtol": [("1e-3", "num")], "--json": [],
                 **_progress_flags(rng), **_runtime_flags(ws, rng)}
        items += _extras(verb, extra, rng, 0, 3)
    elif verb == "diff":
        items += [(model, "in"), (str(ws.model(rng.choice(list(ws.info)))), "in")]
        extra = {"--atol": [("0.1", "num")], "--rtol": [("0.1", "num")], "--json": [], "--all": [],
                 "--only": [(rng.choice(["nodes", "weights", "shapes", "metadata"]), "name")]}
        items += _extras(verb, extra, rng, 0, 2)
    elif verb == "view":  # served by a stand-in for Netron that returns at once (see _view_action)
        items += [(model, "in")]
        items += _extras(verb, {"--around": [(rng.choice([inner, some_node(info), outp]), "name")],
                                "--depth": [(rng.choice(["0", "1", "3"]), "num")], "--port": [("0", "num")],
                                "--no-browser": []}, rng, 0, 3)
    else:  # a verb this harness does not know yet: its positional arguments only
        items += [(model, "in"), (str(ws.out / "result.onnx"), "out")]
    if rng.random() < 0.1 and any(role == "out" for _, role in items):
        items += [("--overwrite", "lit")]
    if rng.random() < 0.2 and any(role == "out" for _, role in items) and verb not in ("split", "run", "run-chain", "compare"):
        items += [(rng.choice(["--external-data", "--inline-data", "--no-check"]), "lit")]
    argv, outputs, reads = _mutate_argv(ws, items, rng)
    action = _cli_action(ws, argv, outputs, reads)
    return _view_action(action) if verb == "view" else action


def some_node(info: ModelInfo) -> str:
    return info.nodes[len(info.nodes) // 2] if info.nodes else "n"


def _view_action(action: Action) -> Action:
    """``view`` with Netron's server replaced for the call: it 'serves' at once and the wait for Ctrl-C
    ends at once, so the verb runs everything before and after serving (the cut around a node, its
    temporary file, the shutdown) without opening a port or a browser."""
    import types

    from graphkit.cli import view

    def call() -> object:
        saved = view.serve, view.time, view.netron_module
        fake = types.SimpleNamespace(stop=lambda address: None)

        def interrupt(seconds: float) -> None:
            raise KeyboardInterrupt

        view.serve = lambda netron, path, port, *, browse: ("localhost", port or 1)  # type: ignore[assignment]
        view.time = types.SimpleNamespace(sleep=interrupt)  # type: ignore[assignment]
        view.netron_module = lambda: fake  # type: ignore[assignment]
        try:
            return action.call()
        finally:
            view.serve, view.time, view.netron_module = saved

    return Action(action.what, call, action.cli, action.exempt, action.outputs, action.reads, action.models)


def _progress_flags(rng: random.Random) -> dict[str, list[tuple[str, str]]]:
    """--progress forces the bars (onto the captured standard error), --no-progress turns them off."""
    return {rng.choice(["--progress", "--no-progress"]): []}


def _custom_flags(ws: Workspace) -> dict[str, list[tuple[str, str]]]:
    """The custom-operator flags of the verbs that run a model only to type a boundary (extract, split)."""
    return {"--custom-ops": [(custom_ops_library(), "in")],
            "--python-ops": [(str(ws.inside / "python_ops.py"), "in")]}


def _feed_flags(ws: Workspace, info: ModelInfo, rng: random.Random) -> dict[str, list[tuple[str, str]]]:
    """The feeds options every verb that runs a model takes (run's, compare's, simplify's, reduce's)."""
    inp = _pick(rng, info.inputs)
    return {"--input": [(f"{inp}=" + str(ws.inside / "in.npy"), "value")], "--shape": [(f"{inp}=1,3,10,10", "num")],
            "--dim": [("batch=2", "num")], "--range": [(f"{inp}=0,1", "num")], "--seed": [("3", "num")],
            "--value": [(f"{inp}={{}}\x01" + rng.choice(["0.5", "[1]", "[[1,2]]"]), "value")]}


def _runtime_flags(ws: Workspace, rng: random.Random) -> dict[str, list[tuple[str, str]]]:
    """Providers and custom operators (run, run-chain, compare, reduce)."""
    return {"--provider": [(rng.choice(["cpu", "cuda", "tensorrt", "bogus", "CPUExecutionProvider"]), "name")],
            "--provider-option": [(rng.choice(["device_id=0", "x=y", "=", "a"]), "name")],
            "--custom-ops": [(custom_ops_library(), "in")],
            "--python-ops": [(str(ws.inside / "python_ops.py"), "in")]}


def _extras(verb: str, extra: dict[str, list[tuple[str, str]]], rng: random.Random, low: int,
            high: int) -> list[tuple[str, str]]:
    """``low`` to ``high`` of the optional flags in ``extra`` that ``verb`` knows, with their values."""
    known = sorted(f for f in extra if f in verb_flags(verb))
    items: list[tuple[str, str]] = []
    for flag in rng.sample(known, min(len(known), rng.randint(low, high))):
        items += [(flag, "lit"), *extra[flag]]
    return items


def _edit_flag(ws: Workspace, key: str, info: ModelInfo, rng: random.Random) -> list[tuple[str, str]]:
    node, attr = rng.choice(info.attrs)
    some_node = _pick(rng, info.nodes)
    tensor = _pick(rng, info.inner)
    init = _pick(rng, info.inits)
    inp = _pick(rng, info.inputs)
    outp = _pick(rng, info.outputs)
    span_in, span_out = SPAN if key == "whole" and rng.random() < 0.7 else (inp, tensor)
    choices = {
        "--set-attr": (f"{node}.{attr}={{}}", "value", "1"),
        "--remove-attr": (f"{node}.{{}}", "name", attr),
        "--set-op-type": (f"{some_node}={{}}", "name", "Relu"),
        "--rename": (f"{tensor}={{}}", "name", "renamed"),
        "--rename-node": (f"{some_node}={{}}", "name", "renamed"),
        "--bypass": (f"{some_node}={{}}", "num", "0"),
        "--remove-node": ("{}", "name", some_node),
        "--remove-node-downstream": ("{}", "name", some_node),
        "--insert-after": (f"{tensor}={{}}", "name", "Relu"),
        "--set-initializer": (f"{init}={{}}", "value", "{bias.npy}"),
        "--input-from-initializer": ("{}", "name", init),
        "--input-from-constant": ("{}", "name", _pick(rng, info.constants)),
        "--freeze": (f"{inp}={{}}", "value", "{in.npy}"),
        "--dynamic": (f"{inp}:0={{}}", "name", "batch"),
        "--fixed": (f"{inp}:0={{}}", "num", "1"),
        "--replace-op": (f"{_pick(rng, info.ops)}={{}}", "name", rng.choice(["Identity", "Gelu", "Relu"])),
        "--set-opset": ("ai.onnx={}", "num", "18"),
        "--remove-opset": ("{}", "name", "ai.onnx.ml"),
        "--cleanup": ("", "lit", ""),
        "--fold-constants": ("{}", "num", "1024"),
        "--replace-span": (f"{span_in}:{span_out}={{}}", "in", str(ws.inside / "span.onnx")),
        "--rename-pattern": ("{}", "name", rng.choice(["^/=", "/=_", "(.*)=x_\\1", "[=y", "conv=Conv"])),
        "--prefix": ("{}", "name", "p_"),
        "--set-dtype": (f"{rng.choice([inp, outp])}={{}}", "name", rng.choice(["float16", "int32", "uint8", "double"])),
        "--fixed-dim": ("{}", "num", rng.choice(["batch=1", "N=3", "unk_1=2"])),
        "--dynamic-dim": ("{}", "name", rng.choice(["1=batch", "3=ch", "10=h"])),
        "--add-output": ("{}", "name", tensor),
        "--remove-output": ("{}", "name", outp),
        "--constants-to-initializers": ("", "lit", ""),
        "--remove-identities": ("", "lit", ""),
        "--fold-shapes": ("", "lit", ""),
        "--merge-constants": ("", "lit", ""),
        "--fuse-gemm": ("", "lit", ""),
        "--fuse-attention": ("", "lit", ""),
        "--fuse-gelu": ("", "lit", ""),
        "--fuse-skip-layernorm": ("", "lit", ""),
        "--inline-branches": ("", "lit", ""),
        "--fuse-conv": ("", "lit", ""),
        "--merge-nodes": ("", "lit", ""),
        "--simplify": ("", "lit", ""),
    }
    known = verb_flags("edit")
    flag = rng.choice(sorted(f for f in choices if f in known))
    fmt, role, value = choices[flag]
    items: list[tuple[str, str]] = [(flag, "lit")] if not fmt else [(flag, "lit"), (fmt + "\x01" + value, role)]
    if flag == "--insert-after" and "--operand" in known and rng.random() < 0.6:
        # an inserted binary op with its constant operand(s) and attributes, or a Cast with its 'to'
        op, operands, attrs = rng.choice([("Sub", ["{bias.npy}"], []), ("Div", ["[2.0]"], []),
                                          ("Cast", [], ["to=10"]), ("Clip", ["0", "6"], []),
                                          ("LeakyRelu", [], ["alpha=0.2"]), ("Gemm", ["[[1]]"], ["transB=1"])])
        items = [(flag, "lit"), (f"{tensor}={{}}\x01{op}", "name")]
        for operand in operands:
            items += [("--operand", "lit"), ("{}\x01" + operand, "value")]
        for text in attrs:
            name, _, value = text.partition("=")
            items += [("--attr", "lit"), (f"{name}={{}}\x01{value}", "value")]
    elif flag == "--rename-pattern" and rng.random() < 0.5:
        items += _extras("edit", {"--scope": [(rng.choice(["tensors", "nodes", "all"]), "name")]}, rng, 1, 1)
    elif flag == "--replace-op" and rng.random() < 0.3:
        items += _extras("edit", {"--drop-attributes": []}, rng, 1, 1)
    return items


def _value_text(ws: Workspace, value: str) -> str:
    if value.startswith("{") and value.endswith(".npy}"):
        name = value[1:-1]
        folder = ws.inside if name in ("bias.npy", "in.npy") else ws.special
        return str(folder / name)
    return value


def _mutate_argv(ws: Workspace, items: list[tuple[str, str]],
                 rng: random.Random) -> tuple[list[str], list[str], list[str]]:
    """Replace one to three values (numbers, names, values, input or output paths) by hostile ones;
    return the command line, the outputs it names and the files it reads (with their data files)."""
    items = list(items)
    mutable = [i for i, (_, role) in enumerate(items) if role != "lit"]
    count = 0 if rng.random() < 0.2 or not mutable else rng.randint(1, min(3, len(mutable)))
    for i in rng.sample(mutable, count):
        text, role = items[i]
        fmt, sep, _ = text.partition("\x01")
        if role == "num":
            new = rng.choice(NUMBERS)
            if not sep and rng.random() < 0.5 and "," in text:  # one of several numbers
                parts = text.split(",")
                parts[rng.randrange(len(parts))] = new
                new = ",".join(parts)
        elif role == "name":
            new = rng.choice(NAMES)
        elif role == "value":
            new = rng.choice(VALUES)
        elif role == "in":
            new = ws.hostile_input(rng, Path(text).suffix)
        else:
            new = ws.hostile_output(rng, Path(text).suffix)
        items[i] = (fmt.replace("{}", new) if sep else new, role)
    argv, outputs, reads = [], [], []
    for text, role in items:
        fmt, sep, value = text.partition("\x01")
        argv.append(_value_text(ws, fmt.replace("{}", value)) if sep else _value_text(ws, text))
        if role == "out":
            outputs.append(argv[-1])
            if argv[-1].endswith(".onnx"):  # replacing a model replaces its weights file as a pair
                outputs.append(argv[-1][: -len(".onnx")] + ".data")
        elif role in ("in", "value"):  # tensor names and numbers are not files, even when one is "in"
            reads += [argv[-1], argv[-1].rpartition("=")[2]]
    if rng.random() < 0.05:
        del argv[rng.randrange(1, len(argv))]
    for path in list(reads):  # a model's data files are read with it; a split folder's files with it
        if path.endswith(".onnx") and "\x00" not in path and os.path.isdir(os.path.dirname(path) or "."):
            folder = Path(os.path.dirname(path) or ".")
            reads += [str(p) for pattern in ("*.data", "*.bin") for p in folder.glob(pattern)]
    return argv, outputs, reads


# ---------------------------------------------------------------------------------------- recipes

JSON_HOSTILE: tuple[object, ...] = (
    None, 5, -1, 2.5, 1e308, "abc", "", [], [1, [2]], {}, {"a": 1}, True, 10**30, {"npy": None}, {"npy": 5},
    {"value": "x", "dtype": "bogus"}, {"value": [[1, 2], [3]], "dtype": "float32"}, {"value": 1, "dtype": "object"},
    {"npy": "FIFO"}, {"npy": "ZERO"}, {"npy": "DIR"}, {"npy": "MISSING"}, {"npy": "../special/fifo.npy"},
    "x" * 100_000, {"value": [1.0] * 3, "dtype": "float32"}, {"value": 1e400}, {"0": "batch", "x": 1},
    ["a", "b"], {"npy": "/dev/zero"}, {"value": [1], "dtype": None}, -(10**30), "²",
)


def _recipe_steps(ws: Workspace, info: ModelInfo, rng: random.Random) -> list[dict[str, object]]:
    node, attr = rng.choice(info.attrs)
    some_node, tensor, init, inp = (_pick(rng, info.nodes), _pick(rng, info.inner), _pick(rng, info.inits),
                                    _pick(rng, info.inputs))
    valid = [
        {"op": "set_attribute", "node": node, "name": attr, "value": 1},
        {"op": "remove_attribute", "node": node, "name": attr},
        {"op": "set_op_type", "node": some_node, "op_type": "Relu"},
        {"op": "rename_tensor", "old": tensor, "new": "t_new"},
        {"op": "rename_node", "old": some_node, "new": "n_new"},
        {"op": "bypass_node", "node": some_node, "input_index": 0},
        {"op": "remove_node", "node": some_node, "downstream": True},
        {"op": "insert_node", "after": tensor, "op_type": "Relu"},
        {"op": "set_initializer", "name": init, "value": {"npy": str(ws.inside / "bias.npy")}},
        {"op": "set_initializer", "name": init, "value": {"value": [1.0], "dtype": "float32"}},
        {"op": "initializer_to_input", "name": init},
        {"op": "constant_to_input", "name": _pick(rng, info.constants)},
        {"op": "input_to_initializer", "name": inp, "value": {"npy": str(ws.inside / "in.npy")}},
        {"op": "set_dims", "tensor": inp, "dims": {0: "batch"}},
        {"op": "replace_op", "old_op": _pick(rng, info.ops), "new_op_type": "Identity"},
        {"op": "set_opset", "domain": "ai.onnx", "version": 18},
        {"op": "cleanup"},
        {"op": "fold_constants", "max_bytes": 1024},
        {"op": "merge", "other": str(ws.model("static")), "connect": {"output": "in"}},
        {"op": "replace_dim", "dim": 1, "new": "batch"},
        {"op": "replace_dim", "dim": 1, "new": "batch", "axis": 0},
        {"op": "set_dtype", "tensor": _pick(rng, [*info.inputs, *info.outputs]), "dtype": "float16"},
        {"op": "to_float16", "keep_io_types": True, "keep_op": [_pick(rng, info.ops)], "keep_node": [some_node]},
        {"op": "simplify", "max_bytes": 1024},
        {"op": "fold_shapes"}, {"op": "merge_constants"}, {"op": "remove_identities"},
        {"op": "constants_to_initializers"},
    ]
    from graphkit import _recipe

    known = [step for step in valid if step["op"] in _recipe.OPERATIONS]  # steps that have landed
    return [dict(rng.choice(known)) for _ in range(rng.randint(1, 3))]


def _hostile_json(ws: Workspace, value: object) -> object:
    """A fresh copy of a pool value (later mutations must not change the pool), special paths filled in."""
    import copy

    names = {"FIFO": "fifo.npy", "ZERO": "zero.npy", "DIR": "dir.npy", "MISSING": "missing.npy"}
    if isinstance(value, dict) and isinstance(value.get("npy"), str) and value["npy"] in names:
        return {"npy": str(ws.special / names[str(value["npy"])])}
    return copy.deepcopy(value)


def _recipe_text(steps: object, yaml_format: bool) -> str:
    import yaml

    if yaml_format:
        return yaml.safe_dump(steps, allow_unicode=True, sort_keys=False)
    return json.dumps(steps, ensure_ascii=False)


def _recipe_case(ws: Workspace, rng: random.Random) -> Action:
    """A recipe file (YAML or JSON) with wrong-typed arguments, bad bytes, bombs or FIFO values, applied by
    ``edit --recipe`` or ``apply_recipe``."""
    key = rng.choice(["whole", "add", "static", "markers", "ifo"])
    info = ws.info[key]
    yaml_format = rng.random() < 0.6
    steps: object = _recipe_steps(ws, info, rng)
    kind = rng.choice(["wrong_type", "wrong_type", "wrong_type", "extra_arg", "missing_arg", "op", "top", "deep",
                       "bomb", "utf8", "bytes", "fifo", "valid", "syntax", "many"])
    path = ws.inside / ("recipe_case.yaml" if yaml_format else "recipe_case.json")
    assert isinstance(steps, list)
    step = rng.choice(steps)
    data: bytes | None = None
    if kind == "wrong_type":
        args = [k for k in step if k != "op"] or ["value"]
        step[rng.choice(args)] = _hostile_json(ws, rng.choice(JSON_HOSTILE))
    elif kind == "extra_arg":
        step[rng.choice(["bogus", "check", "model", "op_type", "value", "self"])] = _hostile_json(ws, rng.choice(JSON_HOSTILE))
    elif kind == "missing_arg":
        args = [k for k in step if k != "op"]
        if args:
            del step[rng.choice(args)]
    elif kind == "op":
        step["op"] = rng.choice([5, None, "no_such_op", "", "__init__", "load", ["cleanup"], "Cleanup", "apply_recipe"])
    elif kind == "top":
        steps = rng.choice([5, "cleanup", None, {"steps": 5}, {"steps": {"op": "cleanup"}}, {"step": []}, [[]], [5],
                            {"steps": steps, "extra": 1}, [None], True])
    elif kind == "deep":
        depth = rng.choice([1000, 30_000, 100_000])
        nest = "[" * depth + "]" * depth
        text = _recipe_text(steps, False).replace('"op"', f'"deep": {nest}, "op"', 1) if rng.random() < 0.5 else nest
        data = text.encode()
        path = path.with_suffix(rng.choice([".json", ".yaml"]))
    elif kind == "bomb":
        lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
        lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
        lines += ["steps:", "  - op: set_attribute", f"    node: {json.dumps(node_name(info))}",
                  "    name: x", "    value: *a9"]
        data = "\n".join(lines).encode()
        path = path.with_suffix(".yaml")
    elif kind == "utf8":
        raw = bytearray(_recipe_text(steps, yaml_format).encode())
        raw[rng.randrange(len(raw) + 1):0] = rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\xfe\xff"])
        data = bytes(raw)
    elif kind == "bytes":
        data, _ = mutate_bytes(_recipe_text(steps, yaml_format).encode(), rng)
    elif kind == "fifo":
        path = ws.special / ("fifo.yaml" if yaml_format else "fifo.json")
    elif kind == "syntax":
        data = rng.choice([b"- op: [", b"{", b"- op: cleanup\n\t- x", b"!!python/object:os.system {}",
                           b"- !!binary AAAA", b"- op: cleanup\n- op: cleanup\n  op: cleanup", b"", b"\n",
                           b"- {op: set_opset, domain: ai.onnx, version: .nan}", b"[NaN]", b"- op: *undefined"])
    elif kind == "many":
        steps = [{"op": "set_opset", "domain": "ai.onnx", "version": 17}] * rng.choice([200, 2000])
    if kind != "fifo":
        path.write_bytes(data if data is not None else _recipe_text(steps, yaml_format).encode())
    model = ws.model(key)
    if rng.random() < 0.7:
        argv = ["edit", str(model), str(ws.out / "edited.onnx"), "--recipe", str(path)]
        if rng.random() < 0.2:
            argv += ["--save-recipe", str(rng.choice([ws.out / "saved.yaml", path, model]))]
        action = _cli_action(ws, argv)
        action.what = f"[{kind}] {action.what}"
        return action
    loaded = gk.load(model)
    return Action(f"[{kind}] gk.apply_recipe(gk.load({ws.text(model)!r}), {ws.text(path)!r})",
                  lambda: gk.apply_recipe(loaded, str(path)), False, models=(loaded,))


def node_name(info: ModelInfo) -> str:
    return info.nodes[0] if info.nodes else "n"


# --------------------------------------------------------------------------------- split manifests


def _manifest_case(ws: Workspace, rng: random.Random) -> Action:
    """A split folder whose manifest has wrong field types, huge numbers, deep nesting, files outside the
    folder, or whose fragments were replaced (FIFO, directory, a huge sparse file), read by ``run-chain``
    or ``load_split``."""
    folder = ws.inside / rng.choice(["split", "split_ext"])
    manifest = folder / "manifest.json"
    data = json.loads(manifest.read_text())
    kind = rng.choice(["field", "field", "field", "outside", "outside", "sha", "sparse", "deep", "utf8", "bytes",
                       "fifo", "replace", "source", "valid", "drop"])
    raw: bytes | None = None
    fragments = data.get("fragments", [])
    frag = rng.choice(fragments) if fragments else {}
    if kind == "field":
        for _ in range(rng.randint(1, 2)):
            _set_random_field(data, rng, ws)
    elif kind == "outside":
        frag[rng.choice(["file", "file", "data"])] = rng.choice([
            "../../outside.onnx", str(ws.root / "outside.onnx"), "/etc/hostname", "../split/part_00.onnx",
            "../split_ext/" + str(frag.get("file", "")), "/dev/zero", "../../special/fifo.onnx", ".", "",
        ])
    elif kind == "sha":
        frag["sha256"] = rng.choice(["0" * 64, "", "zz", 5, None, "0" * 100_000])
    elif kind == "sparse":
        target = folder / str(frag.get("file", "part_00.onnx"))
        with open(target, "r+b") as handle:
            handle.truncate(rng.choice([2**40, 2**33, 2**31 + 7]))
        if rng.random() < 0.5:
            frag["sha256"] = "f" * 64
    elif kind == "deep":
        depth = rng.choice([1000, 30_000, 100_000])
        text = json.dumps(data)
        raw = text.replace('"fragments"', '"deep": ' + "[" * depth + "]" * depth + ', "fragments"', 1).encode() \
            if rng.random() < 0.5 else text.replace('"nodes": ', '"nodes": ' + "[" * depth + "]" * depth + ', "x": ', 1).encode()
    elif kind == "utf8":
        text = bytearray(json.dumps(data, ensure_ascii=False).encode())
        text[rng.randrange(len(text)):0] = rng.choice([b"\xff", b"\xc3", b"\x00"])
        raw = bytes(text)
    elif kind == "bytes":
        raw, _ = mutate_bytes(json.dumps(data).encode(), rng)
    elif kind == "replace":
        target = folder / str(frag.get("file", "part_00.onnx"))
        target.unlink()
        choice = rng.choice(["fifo", "dir", "zero", "link", "missing"])
        if choice == "fifo":
            os.mkfifo(target)
        elif choice == "dir":
            target.mkdir()
        elif choice == "zero":
            import stat

            with contextlib.suppress(OSError):
                os.mknod(target, stat.S_IFCHR | 0o666, os.makedev(1, 5))
        elif choice == "link":
            os.symlink(ws.root / "outside.onnx", target)
    elif kind == "source":
        data["source"] = rng.choice([
            {"path": str(ws.special / "fifo.onnx")}, {"relative_path": "../../special/zero.onnx"},
            {"path": "/dev/zero"}, {"path": [1, 2]}, {"relative_path": 5}, "x", [1, 2], {"sha256": 5},
            {"path": str(ws.special / "dir.onnx"), "sha256": "0" * 64},
        ])
    elif kind == "drop" and data:
        del data[rng.choice(sorted(data))]
    if kind == "fifo":
        folder = ws.special / "fifo_split"
        folder.mkdir()
        os.mkfifo(folder / "manifest.json")
    else:
        text = raw if raw is not None else json.dumps(data).replace('"__1e400__"', "1e400").encode()
        manifest.write_bytes(text)
    if rng.random() < 0.6:
        argv = ["run-chain", str(folder if rng.random() < 0.7 else folder / "manifest.json")]
        argv += rng.choice([["--no-compare"], [], ["--save", str(ws.out / "chain.npz")]])
        action = _cli_action(ws, argv)
    else:
        fn = rng.choice(["load_split", "run_chain"])
        action = Action(f"gk.{fn}({ws.text(folder)!r})", lambda: getattr(gk, fn)(str(folder)), False)
    action.what = f"[{kind}] {action.what}"
    return action


def _set_random_field(data: object, rng: random.Random, ws: Workspace) -> None:
    """Replace one value somewhere in a JSON tree by a hostile one."""
    spots: list[tuple[object, object]] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                spots.append((node, k))
                walk(v)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                spots.append((node, i))
                walk(v)

    walk(data)
    if not spots:
        return
    parent, key = rng.choice(spots)
    value = rng.choice([*JSON_HOSTILE, "__1e400__", -5, 2**64, "float99", "x", [None], {"name": 5}])
    parent[key] = _hostile_json(ws, value)  # type: ignore[index]


# ------------------------------------------------------------------------------------- feed files


def _npy_bytes(header: str, payload: bytes, version: bytes = b"\x01\x00") -> bytes:
    raw = header.encode("latin1")
    raw += b" " * (63 - (len(raw) + 10) % 64) + b"\n"
    return b"\x93NUMPY" + version + len(raw).to_bytes(2, "little") + raw + payload


def _feed_npy(rng: random.Random) -> tuple[bytes, str]:
    import io as _io

    import numpy as np

    good = np.ones((1, 3, 10, 10), np.float32)
    kind = rng.choice(["shape", "shape", "descr", "order", "hlen", "version", "truncate", "magic", "header",
                       "object", "valid", "bytes", "dtype", "scalar"])
    payload = good.tobytes()
    if kind == "shape":
        shape = rng.choice(["(1000000000000,)", "(1099511627776, 1099511627776)", "(-1,)", "(0,)", "(1, 3, 10)",
                            "(2**62,)", "('a',)", "(1.5,)", "(" + "1," * 40 + ")", "(3, -4)", "(None,)"])
        return _npy_bytes(f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}", payload), kind + shape
    if kind == "descr":
        descr = rng.choice(["'|O'", "'<U10'", "'>f4'", "'|V8'", "'<c16'", "'bogus'", "'<f2'", "'|b1'", "[('a', '<f4')]",
                            "'<M8[s]'", "5", "'<f99999999999'"])
        return _npy_bytes(f"{{'descr': {descr}, 'fortran_order': False, 'shape': (1, 3, 10, 10), }}", payload), kind + descr
    if kind == "order":
        return _npy_bytes("{'descr': '<f4', 'fortran_order': 7, 'shape': (1, 3, 10, 10), }", payload), kind
    if kind == "hlen":
        data = bytearray(_npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 10, 10), }", payload))
        data[8:10] = rng.choice([b"\xff\xff", b"\x00\x00", b"\x05\x00"])
        return bytes(data), kind
    if kind == "version":
        return _npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 10, 10), }", payload,
                          rng.choice([b"\x03\x00", b"\x09\x09", b"\x02\x00"])), kind
    if kind == "truncate":
        data = _npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 10, 10), }", payload)
        return data[: rng.randrange(len(data))], kind
    if kind == "magic":
        return b"\x93NUMPX" + _npy_bytes("{}", b"")[6:], kind
    if kind == "header":
        header = rng.choice(["[1, 2]", "{'descr': __import__('os').getcwd()}", "{", "{'shape': (1,)}", "1" * 60000,
                             "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 10, 10), 'x': 1}"])
        return _npy_bytes(header, payload), kind
    buffer = _io.BytesIO()
    if kind == "object":
        np.save(buffer, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    elif kind == "dtype":
        np.save(buffer, rng.choice([np.ones((1, 3, 10, 10), np.int64), np.array(["a"] * 300).reshape(1, 3, 10, 10),
                                    np.ones((1, 3, 10, 10), np.complex64), np.ones((1, 3, 10, 10), bool),
                                    np.ones((1, 3, 10, 10), np.float16), np.ones((300,), np.float32)]))
    elif kind == "scalar":
        np.save(buffer, np.float32(1.0))
    else:
        np.save(buffer, good)
    data = buffer.getvalue()
    if kind == "bytes":
        data, _ = mutate_bytes(data, rng)
    return data, kind


def _feed_npz(ws: Workspace, rng: random.Random) -> tuple[bytes | None, str]:
    import io as _io
    import zipfile

    kind = rng.choice(["member", "member", "truncate", "bomb", "names", "empty", "notzip", "size", "valid", "bytes"])
    buffer = _io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        if kind == "member":
            data, sub = _feed_npy(rng)
            archive.writestr("in.npy", data)
            kind += ":" + sub
        elif kind == "names":
            data, _ = _feed_npy(random.Random(0))
            for name in rng.choice([["in.npy", "in.npy"], ["../in.npy"], ["a/b/in.npy"], ["in.txt"], ["x" * 300 + ".npy"],
                                    ["in.npy", "b.npy", "c.npy"], ["\udcff.npy".encode("utf-8", "surrogateescape").decode("latin1")]]):
                with contextlib.suppress(Exception):
                    archive.writestr(name, data)
        elif kind != "empty":
            data, _ = _feed_npy(random.Random(0))
            archive.writestr("in.npy", data)
    data = buffer.getvalue()
    if kind == "bomb":
        return None, kind
    if kind == "truncate":
        data = data[: rng.randrange(len(data))]
    elif kind == "notzip":
        data = b"PK\x03\x04" + bytes(rng.randrange(256) for _ in range(100))
    elif kind == "size":  # the central directory claims a 6 GB member
        at = data.rfind(b"PK\x01\x02")
        raw = bytearray(data)
        raw[at + 24:at + 28] = (0xFFFFFFF0).to_bytes(4, "little")
        data = bytes(raw)
    elif kind == "bytes":
        data, _ = mutate_bytes(data, rng)
    return data, kind


def _feed_pb(ws: Workspace, rng: random.Random) -> tuple[bytes, str]:
    import numpy as np
    from onnx import TensorProto, numpy_helper

    tensor = numpy_helper.from_array(np.ones((1, 3, 10, 10), np.float32), "in")
    kind = rng.choice(["dtype", "dtype", "dims", "raw", "external", "string", "valid", "bytes", "fields"])
    if kind == "dtype":
        tensor.data_type = rng.choice([99, 0, 8, 16, 17, 23, 2**31 - 1, 15, 14])
    elif kind == "dims":
        del tensor.dims[:]
        tensor.dims.extend(rng.choice([[10**12], [-1], [2**62, 2**62], [0], [1, 3, 10], [1] * 100]))
    elif kind == "raw":
        tensor.raw_data = tensor.raw_data[: rng.randrange(len(tensor.raw_data))]
    elif kind == "external":
        tensor.data_location = TensorProto.EXTERNAL
        tensor.ClearField("raw_data")
        for k, v in (("location", rng.choice(["../special/zero.npy", "/etc/passwd", "x\x00y", "in.npy"])),
                     ("length", rng.choice(["-1", "99999999999999", "²"]))):
            entry = tensor.external_data.add()
            entry.key, entry.value = k, v
    elif kind == "string":
        tensor.data_type = TensorProto.STRING
        tensor.ClearField("raw_data")
        tensor.string_data.extend([b"\xff" * 10] * 300)
    elif kind == "fields":
        tensor.ClearField("raw_data")
        tensor.float_data.extend([1.0] * rng.choice([1, 299, 301]))
    data = tensor.SerializeToString()
    if kind == "bytes":
        data, _ = mutate_bytes(data, rng)
    return data, kind


def _feeds_case(ws: Workspace, rng: random.Random) -> Action:
    """A feed file (.npy/.npz/.pb) with a lying header, a huge declared size, object arrays, a truncated
    zip or an unknown data type, given to ``run --input``, ``compare --reference``, ``edit --freeze`` or
    ``run-chain --input``."""
    fmt = rng.choice([".npy", ".npy", ".npz", ".pb"])
    if fmt == ".npy":
        data, kind = _feed_npy(rng)
    elif fmt == ".npz":
        data, kind = _feed_npz(ws, rng)  # type: ignore[assignment]
    else:
        data, kind = _feed_pb(ws, rng)
    path = ws.inside / f"feed{fmt}"
    if data is None:  # the zip bomb
        shutil.copy(zip_bomb(), path)
    else:
        path.write_bytes(data)
    use = rng.choice(["run", "run", "run_named", "compare", "freeze", "set_init", "chain", "api_run"])
    model = str(ws.model("static"))
    if use == "run":
        argv = ["run", model, "--input", str(path)]
    elif use == "run_named":
        argv = ["run", model, "--input", f"in={path}"]
    elif use == "compare":
        argv = ["compare", model, "--reference", str(path)]
    elif use == "freeze" and fmt == ".npy":
        argv = ["edit", model, str(ws.out / "frozen.onnx"), "--freeze", f"in={path}"]
    elif use == "set_init" and fmt == ".npy":
        argv = ["edit", model, str(ws.out / "set.onnx"), "--set-initializer", f"conv.bias={path}"]
    elif use == "chain":
        argv = ["run-chain", str(ws.inside / "split"), "--input", f"input.1={path}", "--no-compare"]
    else:
        loaded = gk.load(model)
        action = Action(f"[{fmt}:{kind}] gk.compare(gk.load({ws.text(model)!r}), reference={ws.text(path)!r})",
                        lambda: gk.compare(loaded, reference=str(path)), False, models=(loaded,))
        return action
    action = _cli_action(ws, argv)
    action.what = f"[{fmt}:{kind}] {action.what}"
    return action


# ------------------------------------------------------------------------------------ API arguments


def _api_pool(ws: Workspace) -> list[tuple[str, Callable[[], object]]]:
    """Hostile argument values, each with its text (built fresh for every call)."""
    import numpy as np

    sp = ws.special
    return [
        ("None", lambda: None), ("0", lambda: 0), ("-1", lambda: -1), ("2.5", lambda: 2.5),
        ("nan", lambda: float("nan")), ("inf", lambda: float("inf")), ("10**30", lambda: 10**30),
        ("True", lambda: True), ("''", lambda: ""), ("'ghost'", lambda: "ghost"), ("'x'*10000", lambda: "x" * 10000),
        ("'a\\x00b'", lambda: "a\x00b"), ("'\\udcff'", lambda: "\udcff"), ("b'bytes'", lambda: b"bytes"),
        ("[]", lambda: []), ("[None]", lambda: [None]), ("[5]", lambda: [5]), ("['ghost']", lambda: ["ghost"]),
        ("[[]]", lambda: [[]]), ("{}", lambda: {}), ("{'a': 5}", lambda: {"a": 5}), ("{'ghost': 'x'}", lambda: {"ghost": "x"}),
        ("{5: None}", lambda: {5: None}), ("object()", object), ("('a',)", lambda: ("a",)),
        ("Path('a\\x00b')", lambda: Path("a\x00b")), ("fifo.onnx", lambda: str(sp / "fifo.onnx")),
        ("dir.onnx", lambda: str(sp / "dir.onnx")), ("zero.onnx", lambda: str(sp / "zero.onnx")),
        ("missing.onnx", lambda: str(sp / "missing.onnx")), ("Path(dir)", lambda: ws.out),
        ("np.array([1, 2])", lambda: np.array([1, 2])), ("np.array([object()])", lambda: np.array([object()], dtype=object)),
        ("set()", set), ("iter([1])", lambda: iter([1])), ("range(3)", lambda: range(3)), ("1+2j", lambda: 1 + 2j),
        ("{'in': 'abc'}", lambda: {"in": "abc"}), ("{'in': [1, 'a']}", lambda: {"in": [1, "a"]}),
        ("{'input.1': (0, 'x')}", lambda: {"input.1": (0, "x")}), ("{'a': 5}", lambda: {"a": 5}),
        ("{'in': np.ones(10**6)}", lambda: {"in": np.ones(10**6)}), ("{'batch': -5}", lambda: {"batch": -5}),
        ("{'input.1': [10**12]}", lambda: {"input.1": [10**12]}), ("'x'*300+'.onnx'", lambda: "x" * 300 + ".onnx"),
        ("gk.load(my_add)", lambda: gk.load(ws.model("add"))), ("lambda", lambda: (lambda: 0)),
        ("-(10**30)", lambda: -(10**30)), ("'²'", lambda: "²"), ("('a', 'b', 'c')", lambda: ("a", "b", "c")),
    ]


def _api_baseline(ws: Workspace, name: str) -> dict[str, object] | None:
    """Valid keyword arguments of the public function ``name`` on the whole_model fixture (None: unknown)."""
    import numpy as np

    whole = gk.load(ws.model("whole"))
    info = ws.info["whole"]
    inner = "/convs1/convs1.2/Conv_output_0"
    conv = "/convs2/convs2.1/Conv"
    table: dict[str, dict[str, object]] = {
        "load": {"path": str(ws.model("whole"))},
        "save": {"model": whole, "path": str(ws.out / "saved.onnx")},
        "tensor_value": {"model": whole, "tensor": whole.graph.initializer[0]},
        "diff": {"a": whole, "b": gk.load(ws.model("whole"))},
        "extract": {"model": whole, "inputs": [inner], "outputs": ["/convs4/convs4.0/Conv_output_0"]},
        "expose": {"model": whole, "tensors": [inner]},
        "split": {"model": whole, "parts": 2},
        "write_split": {"result": gk.split(whole, parts=2), "outdir": str(ws.out / "split")},
        "load_split": {"path": str(ws.inside / "split")},
        "run_chain": {"fragments": str(ws.inside / "split")},
        "apply_recipe": {"model": whole, "recipe": str(ws.inside / "recipe.yaml")},
        "load_recipe": {"path": str(ws.inside / "recipe.yaml")},
        "merge": {"a": gk.load(ws.model("add")), "b": gk.load(ws.model("static")), "connect": {"output": "in"}},
        "parse_model": {"text": "<ir_version: 8, opset_import: [\"\" : 17]>\ng (float[2] x) => (float[2] y) {\n y = Relu(x)\n}"},
        "bypass_node": {"model": whole, "node": conv},
        "remove_attribute": {"model": whole, "node": conv, "attribute": "group"},
        "remove_node": {"model": whole, "node": "/convs4/convs4.2/Conv"},
        "rename_node": {"model": whole, "old": conv, "new": "renamed"},
        "rename_tensor": {"model": whole, "old": inner, "new": "renamed"},
        "replace_op": {"model": whole, "old_op": "Add"},
        "set_attribute": {"model": whole, "node": conv, "attribute": "group", "value": 1},
        "set_dims": {"model": whole, "tensor": "input.1", "dims": {0: "batch"}},
        "set_initializer": {"model": whole, "tensor": info.inits[1], "value": np.ones(3, np.float32)},
        "set_op_type": {"model": whole, "node": "/Add", "op_type": "Sub"},
        "set_opset": {"model": whole, "domain": "ai.onnx", "version": 18},
        "initializer_to_input": {"model": whole, "tensor": info.inits[0]},
        "constant_to_input": {"model": gk.load(ws.model("add")), "tensor": "/Constant_output_0"},
        "input_to_initializer": {"model": whole, "tensor": "input.1", "value": np.ones((1, 3, 20, 20), np.float32)},
        "insert_node": {"model": whole, "after": inner, "op_type": "Relu"},
        "markers": {"model": gk.load(ws.model("markers"))},
        "from_graphsurgeon": {"graph": None},
        "make_feeds": {"model": whole},
        "to_float16": {"model": whole, "keep_op": ["Add"]},
        "to_float16_with_report": {"model": whole, "keep_io_types": True},
        "simplify": {"model": whole},
        "simplify_with_report": {"model": whole, "passes": ["fold", "dead"]},
        "infer_shapes": {"model": gk.load(ws.model("ifo"))},
        "infer_shapes_with_report": {"model": whole},
        "check_finite": {"model": whole},
    }
    if name == "from_graphsurgeon":
        table[name]["graph"] = gk.to_graphsurgeon(whole)
    if name in table:
        return dict(table[name])
    checked = _check_args_call(ws, name)
    if checked is not None:
        return checked
    import inspect

    params = list(inspect.signature(getattr(gk, name)).parameters.values())
    if params and params[0].name == "model":
        return {"model": whole}
    return None


def _check_args_call(ws: Workspace, name: str) -> dict[str, object] | None:
    """The valid call of ``name`` in tests/test_check_args.py's table (every exported function has one),
    built in the case's workspace."""
    try:
        import test_check_args
    except ImportError:  # run from outside tests/
        return None
    folder = Path(tempfile.mkdtemp(prefix="check_args_", dir=ws.root))
    entry = test_check_args._table(folder).get(name)
    return None if entry is None else dict(entry[1])


def _api_functions() -> list[str]:
    import inspect

    return sorted(n for n in gk.__all__ if inspect.isfunction(getattr(gk, n)))


def _api_case(ws: Workspace, rng: random.Random) -> Action:
    """A public function called with one or two arguments of the wrong type or value (one call in ten valid)."""
    import inspect

    name = rng.choice(_api_functions())
    fn = getattr(gk, name)
    baseline = _api_baseline(ws, name)
    if baseline is None:
        return Action(f"gk.{name}: no baseline", lambda: None, False)
    params = inspect.signature(fn).parameters
    baseline = {k: v for k, v in baseline.items() if k in params}  # the API may have renamed a keyword
    missing = [p for p, param in params.items() if p not in baseline and param.default is param.empty
               and param.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if missing:  # a required argument this harness has no valid value for: calling would only test Python
        return Action(f"gk.{name}: no baseline for {missing}", lambda: None, False)
    pool = _api_pool(ws)
    texts = {k: ("<valid>" if not isinstance(v, gk.Model) else "<model>") for k, v in baseline.items()}
    names = [p for p in params if params[p].kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    hostile = 0 if rng.random() < 0.1 else rng.randint(1, 2)  # a valid call now and then: it must succeed
    for param in rng.sample(names, min(len(names), hostile)):
        text, make = rng.choice(pool)
        baseline[param] = make()
        texts[param] = text
    args, kwargs = [], {}
    for pname, param in params.items():
        if pname not in baseline:
            continue
        if param.kind == inspect.Parameter.POSITIONAL_ONLY:
            args.append(baseline[pname])
        else:
            kwargs[pname] = baseline[pname]
    models = tuple(v for v in baseline.values() if isinstance(v, gk.Model))
    what = f"gk.{name}(" + ", ".join(f"{k}={v}" for k, v in texts.items()) + ")"
    return Action(what, lambda: fn(*args, **kwargs), False, outputs=(str(ws.out),), models=models)


# ----------------------------------------------------------------------------------- model bytes


def _models_case(ws: Workspace, rng: random.Random) -> Action:
    """A mutated fixture (as in the byte campaign above) through every operation, in the workspace."""
    files = [ws.model(k) for k in ws.info]
    source = rng.choice(files)
    data, mutation = mutate(source.read_bytes(), rng)
    target = source.parent / ("mutated" + source.suffix)
    target.write_bytes(data)
    shutil.copy(source, source.parent / "original.onnx")

    def call() -> None:
        ops = _operations(target, ws.out)
        for op in OPERATIONS:
            try:
                ops[op]()
            except gk.GraphkitError:
                if op == "load":
                    raise

    return Action(f"{ws.text(source)} {mutation}", call, False, outputs=(str(ws.out),))


GENERATORS: dict[str, Callable[[Workspace, random.Random], Action]] = {
    "models": _models_case, "cli": _cli_case, "recipes": _recipe_case, "manifests": _manifest_case,
    "feeds": _feeds_case, "api": _api_case,
}


# ------------------------------------------------------------------------------------- verdicts


@dataclass
class Verdict:
    """What one case did. result: ok, error (a GraphkitError / exit 2), traceback, hang, crash."""

    kind: str
    case: int
    what: str
    result: str
    modified: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)
    messy: bool = False  # exit 2 whose message is not one error line plus a hint
    detail: str = ""
    signature: str = ""

    @property
    def failed(self) -> bool:
        return self.result in ("traceback", "hang", "crash") or bool(self.modified) or bool(self.partial)


def _signature(text: str) -> str:
    """Where a traceback ends: the last graphkit frame and the exception type."""
    frames = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("File ")]
    ours = [f for f in frames if "/graphkit/" in f] or frames
    last = [ln for ln in text.splitlines() if ln and not ln.startswith((" ", "hint:", "graphkit:"))]
    where = ours[-1].split("/graphkit/")[-1] if ours else ""
    return f"{where} | {last[-1][:120] if last else ''}"


def _may_change(root: Path, rel: str, kind: str, action: Action) -> bool:
    """Whether the action may replace what was at ``rel``: an output (or inside an output folder) that it
    does not read, and that was a regular file, a folder or a symlink it named (never a FIFO, device or
    socket)."""
    if kind not in ("file", "dir", "link"):
        return False
    path = os.path.realpath(root / rel)
    reads = action.reads if action.reads is not None else \
        tuple(str(p) for p in root.iterdir() if p.name != "out")
    real_reads = {os.path.realpath(r) for r in reads}
    if path not in {os.path.realpath(e) for e in action.exempt} and _within(path, real_reads):
        return False
    if kind == "link":  # a symlink named as the output may be replaced, if what it points at is not read
        return os.path.abspath(root / rel) in {os.path.abspath(o) for o in action.outputs}
    return _within(path, {os.path.realpath(o) for o in action.outputs})


def _within(path: str, folders: set[str]) -> bool:
    return any(path == f or path.startswith(f + os.sep) for f in folders)


def _named(path: Path, outputs: tuple[str, ...]) -> bool:
    """Whether ``path`` is an output the action named, inside one (a folder), or its data file."""
    text = str(path)
    return any(text == out or text.startswith(out + os.sep) or text.startswith(os.path.splitext(out)[0] + ".")
               for out in outputs)


def _looks_temporary(name: str) -> bool:
    base = Path(name).name
    return base.startswith(".") or "tmp" in base.lower() or base.endswith(("~", ".part", ".partial"))


@contextlib.contextmanager
def memory_limit(gb: float) -> Iterator[None]:
    """Cap this process's address space (soft limit) for the block: a case reading /dev/zero must end in
    MemoryError, not in the machine's OOM killer."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = int(gb * 2**30)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    lowered = soft == resource.RLIM_INFINITY or soft > limit
    if lowered:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        if lowered:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def run_case(kind: str, case: int, seed: int, timeout: float, memory_gb: float = 4.0) -> Verdict:
    """Build and run one case of ``kind`` in a fresh workspace (under a memory limit); judge it."""
    tpl = template()
    with memory_limit(memory_gb):
        return _run_case(tpl, kind, case, seed, timeout)


def _run_case(tpl: Template, kind: str, case: int, seed: int, timeout: float) -> Verdict:
    import io as _io

    rng = random.Random(f"{seed}:{kind}:{case}")
    with tempfile.TemporaryDirectory(prefix=f"graphkit-fuzz-{kind}-", dir=_scratch(),
                                     ignore_cleanup_errors=True) as tmp:
        root = Path(tmp) / "w"
        shutil.copytree(tpl.root, root, symlinks=True)
        _make_specials(root / "special")
        ws = Workspace(root, tpl.info)
        cwd = os.getcwd()
        os.chdir(root)
        try:
            action = GENERATORS[kind](ws, rng)
            print(f"  {action.what[:2000]}", file=sys.stderr, flush=True)
            before = _snapshot(root)
            frozen = [m.serialized() for m in action.models]
            out, err = _io.StringIO(), _io.StringIO()
            verdict = Verdict(kind, case, action.what, "ok")
            try:
                with _alarm(timeout), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    value = action.call()
                if action.cli:
                    verdict.result = {0: "ok", 1: "ok", 2: "error"}.get(value, "traceback")  # type: ignore[call-overload]
                    text = err.getvalue()
                    if verdict.result == "traceback":
                        verdict.detail = f"exit {value}: {text[-3000:]}"
                        verdict.signature = _signature(text)
                    elif verdict.result == "error":
                        lines = text.splitlines()
                        if "--progress" in action.what.split():  # the bars drawn before the error
                            lines = lines[next((i for i, ln in enumerate(lines) if ln.startswith("graphkit: ")),
                                               0):]
                        verdict.messy = not (lines and lines[0].startswith("graphkit: error:") and len(lines) <= 2
                                             and all(ln.startswith("hint: ") for ln in lines[1:]))
                        verdict.detail = text[-500:]
            except _Hang:
                verdict.result = "hang"
                verdict.detail = traceback.format_exc()[-3000:]
                verdict.signature = "hang | " + _signature(verdict.detail)
            except gk.GraphkitError as error:
                verdict.result = "error"
                verdict.detail = f"{type(error).__name__}: {error}"[:500]
            except KeyboardInterrupt:
                raise
            except BaseException as error:
                verdict.result = "traceback"
                verdict.detail = traceback.format_exc()[-3000:]
                verdict.signature = _signature(verdict.detail) or type(error).__name__
        finally:
            os.chdir(cwd)
        after = _snapshot(root)
        verdict.modified = sorted(ws.text(root / k) for k, v in before.items()
                                  if after.get(k) != v and not _may_change(root, k, v[0], action))
        verdict.modified += [f"{action.what.split('(')[0]} argument {i}" for i, (m, b) in
                             enumerate(zip(action.models, frozen)) if m.serialized() != b]
        new = [k for k, v in after.items() if k not in before and v[0] != "dir"]
        if verdict.result in ("ok",):
            new = [k for k in new if _looks_temporary(k) and not _named(root / k, action.outputs)]
        verdict.partial = sorted(ws.text(root / k) for k in new)
    return verdict


# ------------------------------------------------------------------------------------ campaigns


@dataclass
class KindSummary:
    """Counts of one kind's campaign."""

    kind: str
    cases: int = 0
    ok: int = 0
    errors: int = 0
    tracebacks: int = 0
    hangs: int = 0
    crashes: int = 0
    modified: int = 0
    partial: int = 0
    messy: int = 0
    seconds: float = 0.0
    failures: list[dict[str, object]] = field(default_factory=list)
    messy_examples: list[dict[str, object]] = field(default_factory=list)  # the first few, to look at

    @property
    def failed(self) -> int:
        return sum(1 for _ in self.failures)

    def add(self, verdict: Verdict) -> None:
        self.cases += 1
        counter = {"ok": "ok", "error": "errors", "traceback": "tracebacks", "hang": "hangs", "crash": "crashes"}
        attr = counter[verdict.result]
        setattr(self, attr, getattr(self, attr) + 1)
        self.modified += bool(verdict.modified)
        self.partial += bool(verdict.partial)
        self.messy += verdict.messy
        if verdict.messy and len(self.messy_examples) < 20:
            self.messy_examples.append({"case": verdict.case, "what": verdict.what, "detail": verdict.detail})
        if verdict.failed:
            self.failures.append(asdict(verdict))

    def line(self) -> str:
        return (f"{self.kind}: {self.cases} cases in {self.seconds:.0f} s: ok {self.ok}, graphkit errors {self.errors}, "
                f"tracebacks {self.tracebacks}, hangs {self.hangs}, crashes {self.crashes}, "
                f"modified inputs {self.modified}, partial files {self.partial} (messy error messages {self.messy})")

    def distinct(self) -> dict[str, list[dict[str, object]]]:
        """Failures grouped by what went wrong."""
        groups: dict[str, list[dict[str, object]]] = {}
        for f in self.failures:
            if f["modified"]:
                key = "modified input"
            elif f["partial"]:
                key = "partial file"
            else:
                key = str(f["signature"] or f["result"])
            groups.setdefault(key, []).append(f)
        return groups


def kind_worker(kind: str, cases: int, seed: int, timeout: float, start: int, memory_gb: float) -> int:
    """Run cases of ``kind`` in this process under a memory limit; one JSON line per case on stdout."""
    limit = int(memory_gb * 2**30)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    results = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # what the verbs (and ONNX Runtime) print goes nowhere
    logging_off()
    template()
    results.write("ready\n")
    results.flush()
    for case in range(start, start + cases):
        print(f"case {kind} {case}", file=sys.stderr, flush=True)
        verdict = run_case(kind, case, seed, timeout)
        results.write(json.dumps(asdict(verdict)) + "\n")
        results.flush()
    return 0


def logging_off() -> None:
    import logging

    logging.disable(logging.CRITICAL)


def kind_campaign(kind: str, cases: int, seed: int = 0, timeout: float = 10.0, memory_gb: float = 4.0,
                  start: int = 0, progress: Callable[[KindSummary], None] | None = None) -> KindSummary:
    """Run ``cases`` cases of ``kind`` in worker processes; a worker that dies (crash) or stops answering
    (a hang the alarm could not break) is replaced, and the case it was on is counted."""
    import select

    summary = KindSummary(kind)
    started = time.perf_counter()
    end = start + cases
    next_case = start
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    while next_case < end:
        cmd = [sys.executable, __file__, "--worker", "--kind", kind, "--cases", str(end - next_case),
               "--start", str(next_case), "--seed", str(seed), "--timeout", str(timeout),
               "--memory-gb", str(memory_gb)]
        with tempfile.TemporaryFile() as errors:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errors, env=env)
            assert proc.stdout is not None
            fd = proc.stdout.fileno()
            buffer = b""
            lost = ""
            started_up = False
            while True:
                # a case's own watcher ends it within 12 x timeout; the worker's start (imports, the
                # template) may take minutes on a busy machine
                ready, _, _ = select.select([fd], [], [], timeout * 12 + 60 if started_up else 900)
                if not ready:
                    proc.kill()
                    lost = "hang"
                    break
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    lost = "crash" if next_case < end else ""
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line == b"ready":
                        started_up = True
                        continue
                    verdict = Verdict(**json.loads(line))
                    summary.add(verdict)
                    next_case = verdict.case + 1
                    if progress is not None:
                        progress(summary)
            code = proc.wait()
            if lost:
                errors.seek(0)
                log = errors.read().decode("utf-8", "replace")
                tail = log[-2000:]
                last = [ln.strip() for ln in log.splitlines() if ln.startswith("  ")]
                summary.add(Verdict(kind, next_case, last[-1] if last else f"case {next_case}", lost,
                                    detail=f"worker exit {code}: {tail}", signature=f"{lost} | exit {code}"))
                next_case += 1
    summary.seconds = round(time.perf_counter() - started, 1)
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description="fuzz graphkit with hostile models, command lines, recipes, "
                                                 "split manifests, feed files and API arguments")
    parser.add_argument("--kind", choices=[*KINDS, "all", "bytes"], default="bytes",
                        help="what to fuzz; 'bytes' is the original model-byte campaign (default)")
    parser.add_argument("--cases", type=int, default=1000, help="cases (per kind)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per case before it is a hang")
    parser.add_argument("--memory-gb", type=float, default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="write the summaries (with every failure) to this file")
    args = parser.parse_args()
    if args.worker and args.kind in KINDS:
        return kind_worker(args.kind, args.cases, args.seed, args.timeout, args.start, args.memory_gb or 4.0)
    if args.worker:
        return worker(args.cases, args.seed, args.timeout, args.start, args.memory_gb or 6.0)
    if args.kind == "bytes":
        summary = campaign(args.cases, args.seed, args.timeout, args.memory_gb or 6.0)
        print(f"{summary.cases} cases in {summary.seconds} s: {summary.operations_ok} operations succeeded, "
              f"{summary.graphkit_errors} ended in a graphkit error, {len(summary.failures)} failures, "
              f"{len(summary.crashes)} crashes")
        for failure in summary.failures[:20]:
            print(f"FAILURE case {failure['case']} {failure['fixture']} {failure['mutation']} {failure['op']}: "
                  f"{failure['error']}")
        return 1 if summary.failures or summary.crashes else 0
    failed = False
    results = []
    for kind in KINDS if args.kind == "all" else (args.kind,):
        def progress(partial: KindSummary, done: list[KindSummary] = results) -> None:
            if args.json and partial.cases % 20 == 0:
                args.json.write_text(json.dumps([asdict(s) for s in [*done, partial]], indent=1))

        summary = kind_campaign(kind, args.cases, args.seed, args.timeout, args.memory_gb or 4.0, args.start,
                                progress)
        results.append(summary)
        print(summary.line(), flush=True)
        for key, group in sorted(summary.distinct().items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(group):>5} x {key}\n          e.g. case {group[0]['case']}: {group[0]['what'][:300]}")
        for messy in summary.messy_examples:
            print(f"  messy error, case {messy['case']}: {str(messy['what'])[:300]}\n          {messy['detail']!r}")
        failed = failed or bool(summary.failures)
        if args.json:
            args.json.write_text(json.dumps([asdict(s) for s in results], indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
