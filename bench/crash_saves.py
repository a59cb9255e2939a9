"""Kill campaign: a writer process SIGKILLed at random instants while saving a model with external data.

Each round starts a writer (a separate Python process) that saves version N+1 of a model over version
N (every weight holds N+1), waits until it is about to save, sleeps a random time within the save's
duration and kills it. Then the model at the destination must load and hold version N or N+1 in
every weight, never a mix. After the last round one more save must run to completion and leave the
model and one data file, no temporaries.

    nice -n 19 python bench/crash_saves.py                    # 60 kills of a 128 MiB model
    nice -n 19 python bench/crash_saves.py --kills 15 --mib 20

The counts (old / new / other) are printed at the end; "other" must be 0.
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import graphkit as gk  # noqa: E402
from graphkit import _write  # noqa: E402

TENSOR_MIB = 16


def weights_model(generation: int, mib: int) -> gk.Model:
    """A model of ``mib`` MiB of float32 weights (16 MiB tensors), every one holding ``generation``."""
    floats = TENSOR_MIB * 2**20 // 4
    count = max(1, mib // TENSOR_MIB)
    inits = [onnx.numpy_helper.from_array(np.full(floats, generation, np.float32), f"w{i}") for i in range(count)]
    nodes = [onnx.helper.make_node("Add", ["x", f"w{i}"], [f"y{i}"]) for i in range(count)]
    graph = onnx.helper.make_graph(
        nodes, "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [floats])],
        [onnx.helper.make_tensor_value_info(f"y{i}", onnx.TensorProto.FLOAT, [floats]) for i in range(count)],
        inits)
    proto = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    proto.ir_version = 8
    return gk.Model(proto)


def generation(path: Path) -> int | None:
    """The one version every weight of the model at ``path`` holds; None when it does not load or is mixed."""
    try:
        model = gk.load(path)
        values = [gk.tensor_value(model, t) for t in model.graph.initializer]
        seen = {float(v) for value in values for v in (value.min(), value.max())}
    except gk.GraphkitError as err:
        print(f"  does not load: {err}", file=sys.stderr)
        return None
    if len(seen) != 1:
        print(f"  mixed: {sorted(seen)}", file=sys.stderr)
        return None
    return int(seen.pop())


def writer(dest: Path, version: int, mib: int) -> None:
    model = weights_model(version, mib)
    print("ready", flush=True)
    gk.save(model, dest, external=True)


def start_writer(dest: Path, version: int, mib: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, __file__, "--writer", str(dest), str(version), str(mib)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise SystemExit("the writer did not start")
    return proc


def temps(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(_write.TEMP_PREFIX)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=60)
    parser.add_argument("--mib", type=int, default=128, help="size of the model's weights")
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--dir", type=Path, help="where to write (default: a temporary folder)")
    parser.add_argument("--writer", nargs=3, metavar=("DEST", "VERSION", "MIB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.writer:
        writer(Path(args.writer[0]), int(args.writer[1]), int(args.writer[2]))
        return 0
    folder = Path(tempfile.mkdtemp(prefix="gk-crash-", dir=args.dir))
    dest = folder / "model.onnx"
    try:
        durations = []
        for version in (0, 1):  # (the second one replaces a pair, like every killed save)
            proc = start_writer(dest, version, args.mib)
            start = time.perf_counter()
            proc.wait()
            durations.append(time.perf_counter() - start)
        window = max(durations)
        print(f"model: {args.mib} MiB of weights; one save takes {window:.2f} s; killing within 0..{window * 1.2:.2f} s")
        rng = random.Random(args.seed)
        counts = {"old": 0, "new": 0, "other": 0}
        left_temps = 0
        current = 1
        for round_ in range(args.kills):
            proc = start_writer(dest, current + 1, args.mib)
            time.sleep(rng.uniform(0, window * 1.2))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            found = generation(dest)
            left_temps += bool(temps(folder))
            if found == current:
                counts["old"] += 1
            elif found == current + 1:
                counts["new"] += 1
                current = found
            else:
                counts["other"] += 1
                print(f"round {round_}: found version {found}, expected {current} or {current + 1}")
        proc = start_writer(dest, current + 1, args.mib)
        proc.wait()
        final_ok = generation(dest) == current + 1
        files = sorted(p.name for p in folder.iterdir())
        print(f"kills: {args.kills}; old {counts['old']}, new {counts['new']}, other {counts['other']}; "
              f"{left_temps} kills left a temporary file")
        print(f"after one more save: version {'ok' if final_ok else 'WRONG'}; files {files}")
        clean = final_ok and counts["other"] == 0 and not temps(folder) and len(files) == 2
        return 0 if clean else 1
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
